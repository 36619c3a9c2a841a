//go:build linux

package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestClusterInNamespaces: three nodes on three hosts form a cluster that
// the test process reaches over the bridge; cutting the leader off elects
// another; Raft traffic survives a delaying proxy; teardown leaves nothing.
func TestClusterInNamespaces(t *testing.T) {
	requireNetAdmin(t)
	log := testLogger(t)
	c := startCluster(t, log, 3, func(cr NodeCrash) { t.Errorf("node crashed: %+v", cr) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := c.Dial(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateQueue(ctx, "smoke", nil); err != nil {
		t.Fatal(err)
	}
	c.Proxy.SetDelay(-1, 100*time.Millisecond)
	start := time.Now()
	if _, err := cl.Enqueue(ctx, "smoke", &raftqv1.EnqueueMessage{Payload: []byte("slow")}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("enqueue took %v with 100ms each way on Raft links", d)
	}
	c.Proxy.SetDelay(-1, 0)

	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n != old {
			if err := c.Net.Cut(ctx, old.Host, n.Host); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = harness.WaitFor(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		st, err := c.Status(ctx, c.Nodes[(indexOf(c, old)+1)%3])
		if err == nil && (st.LeaderId == "" || st.LeaderId == old.ID) {
			err = fmt.Errorf("leader %q", st.LeaderId)
		}
		return err
	})
	if err != nil {
		t.Fatalf("no new leader after isolating %s: %v", old.ID, err)
	}
	if _, err := cl.Enqueue(ctx, "smoke", &raftqv1.EnqueueMessage{Payload: []byte("after cut")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Net.FlushFilters(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

func indexOf(c *Cluster, n *Node) int {
	for i, m := range c.Nodes {
		if m == n {
			return i
		}
	}
	return -1
}
