package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestClusterThroughHost: three nodes built by host.New take a write at a
// follower (forwarded to the leader over the host's peer connections),
// every node applies it, a restarted node comes back on its own ports and
// data dir as a voter, and the cleanup's stop leaves no goroutine behind.
func TestClusterThroughHost(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Adjust: func(_ string, cfg *host.Config) {
		cfg.Node.ReplicaCheckInterval = -1
	}})
	l := c.Leader()
	var f *testcluster.Node
	for _, n := range c.Nodes {
		if n != l {
			f = n
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "kit"}); err != nil {
		t.Fatal(err)
	}
	res, err := f.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "kit", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("a")}}})
	if err != nil || len(res.GetMessageIds()) != 1 {
		t.Fatalf("enqueue at a follower: %v, %v", res, err)
	}
	applied := l.Host.Broker().State().Reader().AppliedIndex()
	r := c.Restart(f)
	if r.Addrs != f.Addrs {
		t.Fatalf("restarted on %+v, was %+v", r.Addrs, f.Addrs)
	}
	c.WaitStable(30 * time.Second)
	harness.Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			q, err := n.Host.Broker().State().Reader().GetQueue("kit")
			if err != nil {
				return err
			}
			if n.Host.Broker().State().Reader().AppliedIndex() < applied || q.Stats.Ready != 1 {
				return errNotYet(n.ID)
			}
		}
		return nil
	})
}

type errNotYet string

func (e errNotYet) Error() string { return string(e) + " has not applied the write" }
