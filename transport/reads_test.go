package transport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestReadConsistencyHeader: the raftq-read-consistency header on a
// follower. Absent or "linearizable", a read goes to the leader (which
// confirms its leadership); "stale" is answered from the follower's own
// state (its GetQueue knows no consumers: they are registered on the
// leader), except ListConsumers, which only the leader can answer; any
// other value, or two values, is INVALID_ARGUMENT on every read, and
// writes ignore the header.
func TestReadConsistencyHeader(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.Leader()
	f := c.Followers()[0]
	mustCreate(t, l, "q", nil)
	mustCreate(t, l, "w", nil)
	mustEnqueue(t, l, "q", []byte("m"))
	lctx, stopLease := context.WithCancel(context.Background())
	defer stopLease()
	if _, err := l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "q", ConsumerName: "held", MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the consumer to register and hold the message", func() error {
		r, err := l.Broker.GetQueue(tctx(t, 5*time.Second), &raftqv1.GetQueueRequest{Name: "q"})
		if st := r.GetQueue().GetStats(); err != nil || st.GetConsumers() != 1 || st.GetInFlight() != 1 {
			return fmt.Errorf("%v %v", st, err)
		}
		return nil
	})
	c.Synced()

	with := func(vals ...string) context.Context {
		ctx := tctx(t, 10*time.Second)
		for _, v := range vals {
			ctx = metadata.AppendToOutgoingContext(ctx, "raftq-read-consistency", v)
		}
		return ctx
	}
	for _, tc := range []struct {
		name      string
		header    []string
		code      codes.Code
		consumers int64 // GetQueue's consumer count (where OK)
	}{
		{"absent: the leader answers", nil, codes.OK, 1},
		{"linearizable: the leader answers", []string{"linearizable"}, codes.OK, 1},
		{"stale: the follower answers", []string{"stale"}, codes.OK, 0},
		{"unknown value", []string{"eventual"}, codes.InvalidArgument, 0},
		{"empty value", []string{""}, codes.InvalidArgument, 0},
		{"two values", []string{"stale", "stale"}, codes.InvalidArgument, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gq, err := f.Broker.GetQueue(with(tc.header...), &raftqv1.GetQueueRequest{Name: "q"})
			if status.Code(err) != tc.code {
				t.Fatalf("GetQueue: %v, want %v", err, tc.code)
			}
			if err == nil && gq.GetQueue().GetStats().GetConsumers() != tc.consumers {
				t.Errorf("GetQueue: %d consumers, want %d (%v)", gq.GetQueue().GetStats().GetConsumers(), tc.consumers, gq)
			}
			if err == nil && gq.GetQueue().GetStats().GetInFlight() != 1 {
				t.Errorf("GetQueue: in flight %d, want 1", gq.GetQueue().GetStats().GetInFlight())
			}
			lq, err := f.Broker.ListQueues(with(tc.header...), &raftqv1.ListQueuesRequest{Prefix: "q"})
			if status.Code(err) != tc.code || err == nil && len(lq.GetQueues()) != 2 {
				t.Errorf("ListQueues: %v %v, want %v and q, q.dlq", lq, err, tc.code)
			}
			pk, err := f.Broker.Peek(with(tc.header...), &raftqv1.PeekRequest{Queue: "q"})
			if status.Code(err) != tc.code || err == nil && len(pk.GetMessages()) != 0 {
				t.Errorf("Peek: %v %v, want %v and nothing ready", pk, err, tc.code)
			}
			lc, err := f.Broker.ListConsumers(with(tc.header...), &raftqv1.ListConsumersRequest{Queue: "q"})
			if status.Code(err) != tc.code || err == nil && len(lc.GetConsumers()) != 1 {
				t.Errorf("ListConsumers: %v %v, want %v and the leader's consumer", lc, err, tc.code)
			}
			// A write ignores the header.
			if _, err := f.Broker.Enqueue(with(tc.header...), &raftqv1.EnqueueRequest{Queue: "w", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("w")}}}); err != nil {
				t.Errorf("Enqueue with the header: %v", err)
			}
		})
	}
}
