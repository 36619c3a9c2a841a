package transport_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestLeaseLimitEndsStreamOnceSettled (issue 26): a plain gRPC client
// (grpcurl) that asks for `limit` deliveries gets its stream ended with OK
// once each of them is settled, however it was settled, instead of
// waiting until its own deadline and reporting DEADLINE_EXCEEDED. Nothing
// beyond the limit is granted.
func TestLeaseLimitEndsStreamOnceSettled(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	ack := func(ctx context.Context, q string, d *raftqv1.Delivery) error {
		r, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: q, Acks: []*raftqv1.LeaseRef{refOf(d)}})
		if err == nil && !r.Results[0].Ok {
			err = errors.New(r.Results[0].Error)
		}
		return err
	}
	nack := func(unprocessed bool) func(ctx context.Context, q string, d *raftqv1.Delivery) error {
		return func(ctx context.Context, q string, d *raftqv1.Delivery) error {
			r, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: q, Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Unprocessed: unprocessed}}})
			if err == nil && !r.Results[0].Ok {
				err = errors.New(r.Results[0].Error)
			}
			return err
		}
	}
	for _, tc := range []struct {
		name      string
		settle    []func(ctx context.Context, q string, d *raftqv1.Delivery) error
		wantReady int64 // of the 3 enqueued, once the stream ended
	}{
		{"acked", []func(context.Context, string, *raftqv1.Delivery) error{ack, ack}, 1},
		{"nacked", []func(context.Context, string, *raftqv1.Delivery) error{nack(false), ack}, 2},
		{"handed back", []func(context.Context, string, *raftqv1.Delivery) error{nack(true), nack(true)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := "limit-" + map[string]string{"acked": "a", "nacked": "n", "handed back": "h"}[tc.name]
			ctx := tctx(t, 20*time.Second)
			mustCreate(t, l, q, &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
			mustEnqueue(t, l, q, []byte("1"), []byte("2"), []byte("3"))
			s, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: q, MaxInFlight: 3, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			ds := recvN(t, s, 2)
			for i, d := range ds {
				if err := tc.settle[i](ctx, q, d); err != nil {
					t.Fatalf("settle %s: %v", d.Id, err)
				}
			}
			if r, err := s.Recv(); err != io.EOF {
				t.Fatalf("after its %d deliveries were settled the stream gave %v, %v; want it ended with OK", len(ds), r, err)
			}
			waitUntil(t, 10*time.Second, "the consumer to be gone", func() error {
				if st := queueInfo(t, l, q).Stats; st.Consumers != 0 {
					return errors.New("still registered")
				}
				return nil
			})
			if st := queueInfo(t, l, q).Stats; st.Ready != tc.wantReady || st.InFlight != 0 {
				t.Fatalf("stats %v, want %d ready and nothing leased", st, tc.wantReady)
			}
		})
	}
}
