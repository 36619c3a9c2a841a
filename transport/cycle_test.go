package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestDeliveryCycleEntries counts the Raft entries a consumer working
// through a backlog costs, by the leader's applied index (not by time):
// with acks carrying the grants of the credit they free (CarryGrants, log
// version 10) about one entry per delivered message, the ack's; with
// every grant in an entry of its own (the default) about two.
// The consumer acks each delivery and waits for the answer, so no ack
// shares an entry with another.
func TestDeliveryCycleEntries(t *testing.T) {
	const msgs = 120
	for _, tc := range []struct {
		name     string
		separate bool
	}{
		{"acks carry grants", false},
		{"separate grants", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startInproc(t, inprocOpts{nodes: 1, carryGrants: !tc.separate})
			l := c.Leader()
			waitUntil(t, 20*time.Second, "cluster version", func() error {
				if v := l.State().Reader().ClusterVersion(); v != fsm.MaxLogVersion {
					return fmt.Errorf("cluster version %d, want %d", v, fsm.MaxLogVersion)
				}
				return nil
			})
			ctx := tctx(t, 60*time.Second)
			if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "cycle"}); err != nil {
				t.Fatal(err)
			}
			batch := make([]*raftqv1.EnqueueMessage, msgs)
			for i := range batch {
				batch[i] = &raftqv1.EnqueueMessage{Payload: []byte(fmt.Sprint(i))}
			}
			if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "cycle", Messages: batch}); err != nil {
				t.Fatal(err)
			}
			before := l.State().Reader().AppliedIndex()
			s, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "cycle", MaxInFlight: 8})
			if err != nil {
				t.Fatal(err)
			}
			var last string // ids are 16 hex digits: string order is numeric order
			for n := 0; n < msgs; {
				r, err := s.Recv()
				if err != nil {
					t.Fatalf("after %d deliveries: %v", n, err)
				}
				for _, d := range r.Messages {
					if d.Id <= last || d.Attempt != 1 {
						t.Fatalf("delivery %s (attempt %d) after %s", d.Id, d.Attempt, last)
					}
					last = d.Id
					ar, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "cycle", Acks: []*raftqv1.LeaseRef{refOf(d)}})
					if err != nil || !ar.Results[0].Ok {
						t.Fatalf("ack %s: %v %v", d.Id, ar, err)
					}
					n++
				}
			}
			entries := l.State().Reader().AppliedIndex() - before
			t.Logf("%d deliveries: %d entries (%.2f per delivery)", msgs, entries, float64(entries)/msgs)
			if tc.separate {
				if entries < msgs*8/5 {
					t.Fatalf("%d entries for %d deliveries with separate grants, want about two each", entries, msgs)
				}
				return
			}
			if entries > msgs*6/5 {
				t.Fatalf("%d entries for %d deliveries, want about one each", entries, msgs)
			}
		})
	}
}
