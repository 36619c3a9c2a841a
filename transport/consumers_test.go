package transport_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestListConsumers: a follower forwards ListConsumers to the leader,
// which describes each Lease stream by its name and peer address with its
// flow counters; an unknown queue is NotFound.
func TestListConsumers(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l, f := c.Leader(), c.Followers()[0]
	mustCreate(t, l, "lc", nil)
	mustEnqueue(t, l, "lc", []byte("1"), []byte("2"), []byte("3"))
	ctx := tctx(t, 30*time.Second)
	start := time.Now()
	stream, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "lc", ConsumerName: "worker-a", MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, stream, 3)
	if _, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lc", Acks: refsOf(ds[:1])}); err != nil {
		t.Fatal(err)
	}

	var got *raftqv1.ConsumerInfo
	waitUntil(t, 10*time.Second, "the ack to show in ListConsumers", func() error {
		r, err := f.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "lc"})
		if err != nil {
			return err
		}
		if len(r.Consumers) != 1 {
			return fmt.Errorf("%d consumers", len(r.Consumers))
		}
		got = r.Consumers[0]
		if got.InFlight != 2 {
			return fmt.Errorf("in flight %d", got.InFlight)
		}
		return nil
	})
	if got.Name != "worker-a" || got.Delivered != 3 || got.Acked != 1 || got.Credit != 2 || got.MaxInFlight != 4 || got.Id == "" {
		t.Errorf("consumer = %v, want worker-a with 3 delivered, 1 acked, 2 in flight, credit 2 of 4", got)
	}
	if !strings.HasPrefix(got.Address, "127.0.0.1:") {
		t.Errorf("address = %q, want the stream's loopback peer address", got.Address)
	}
	if got.Identity != "" {
		t.Errorf("identity = %q without auth", got.Identity)
	}
	if since := time.UnixMilli(got.ConnectedSinceMs); since.Before(start.Add(-time.Second)) || since.After(time.Now()) {
		t.Errorf("connected since %v, want during the test (from %v)", since, start)
	}

	_, err = f.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown queue: %v, want NotFound", err)
	}
	_, err = l.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "bad name!"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad name: %v, want InvalidArgument", err)
	}
}
