package test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func startSingle(t *testing.T, extra ...string) (*harness.Node, *client.Client) {
	t.Helper()
	n := harness.TestNode(t, binary, "n1", extra...)
	n.Start()
	c := harness.Dial(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	return n, c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openLease opens a raw Lease stream on the node (the test is then the
// consumer, acking by hand).
func openLease(t *testing.T, ctx context.Context, n *harness.Node, queue string, maxInFlight int32) raftqv1.Broker_LeaseClient {
	t.Helper()
	conn := rawConn(t, n)
	s, err := raftqv1.NewBrokerClient(conn).Lease(ctx, &raftqv1.LeaseRequest{Queue: queue, MaxInFlight: maxInFlight, ConsumerName: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func recvN(t *testing.T, s raftqv1.Broker_LeaseClient, n int) []*raftqv1.Delivery {
	t.Helper()
	var out []*raftqv1.Delivery
	for len(out) < n {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d of %d deliveries: %v", len(out), n, err)
		}
		if len(r.Messages) == 0 {
			t.Fatal("empty LeaseResponse")
		}
		out = append(out, r.Messages...)
	}
	return out
}

func refOf(d *raftqv1.Delivery) *raftqv1.LeaseRef {
	return &raftqv1.LeaseRef{MessageId: d.Id, LeaseToken: d.LeaseToken}
}

func TestSingleNodeLifecycle(t *testing.T) {
	n, c := startSingle(t)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{MaxDeliveries: 2, VisibilityTimeoutMs: 60_000}); err != nil {
		t.Fatal(err)
	}

	t.Run("fifo of ten", func(t *testing.T) {
		var payloads [][]byte
		for i := range 10 {
			payloads = append(payloads, []byte(fmt.Sprint(i)))
		}
		ids, err := c.EnqueuePayloads(ctx, "jobs", payloads...)
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ds := recvN(t, openLease(t, sctx, n, "jobs", 10), 10)
		for i, d := range ds {
			if d.Id != ids[i] || string(d.Payload) != fmt.Sprint(i) || d.Attempt != 1 {
				t.Fatalf("delivery %d = %s %q attempt %d, want %s", i, d.Id, d.Payload, d.Attempt, ids[i])
			}
		}
		var refs []*raftqv1.LeaseRef
		for _, d := range ds {
			refs = append(refs, refOf(d))
		}
		res, err := c.Ack(ctx, "jobs", refs...)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !r.Ok {
				t.Fatalf("ack %d: %v", i, r)
			}
		}
		// A second ack of the same lease is a retry (its first answer may
		// have been lost): OK, and nothing changes. Another token for the
		// acked message is unknown.
		acked := func() int64 {
			t.Helper()
			q, err := c.GetQueue(ctx, "jobs", false)
			if err != nil {
				t.Fatal(err)
			}
			return q.GetStats().GetAckedTotal()
		}
		before := acked()
		res, err = c.Ack(ctx, "jobs", refs[0])
		if err != nil || !res[0].Ok {
			t.Fatalf("second ack of an acked message = %v, %v; want OK (a retry)", res, err)
		}
		other := &raftqv1.LeaseRef{MessageId: refs[0].MessageId, LeaseToken: refs[1].LeaseToken}
		res, err = c.Ack(ctx, "jobs", other)
		if err != nil || res[0].Ok || codes.Code(res[0].Code) != codes.NotFound {
			t.Fatalf("ack of an acked message under another token = %v, %v; want NOT_FOUND", res, err)
		}
		if got := acked(); got != before {
			t.Fatalf("acked_total %d after a retried ack, want %d", got, before)
		}
	})

	t.Run("nack past max deliveries then redrive", func(t *testing.T) {
		if _, err := c.EnqueuePayloads(ctx, "jobs", []byte("poison")); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s := openLease(t, sctx, n, "jobs", 1)
		for attempt := int32(1); attempt <= 2; attempt++ {
			d := recvN(t, s, 1)[0]
			if d.Attempt != attempt {
				t.Fatalf("attempt = %d, want %d", d.Attempt, attempt)
			}
			if _, err := c.Nack(ctx, "jobs", &raftqv1.NackItem{MessageId: d.Id, LeaseToken: d.LeaseToken}); err != nil {
				t.Fatal(err)
			}
		}
		harness.Eventually(t, 10*time.Second, func() error {
			dl, err := c.Peek(ctx, "jobs", 10, true)
			if err != nil {
				return err
			}
			if len(dl) != 1 || dl[0].DeadLetterReason != "max_deliveries" {
				return fmt.Errorf("dlq = %v", dl)
			}
			return nil
		})
		moved, err := c.Redrive(ctx, "jobs", 0)
		if err != nil || moved != 1 {
			t.Fatalf("redrive = %d, %v", moved, err)
		}
		d := recvN(t, s, 1)[0]
		if string(d.Payload) != "poison" || d.Attempt != 1 {
			t.Fatalf("after redrive: %q attempt %d", d.Payload, d.Attempt)
		}
		if _, err := c.Ack(ctx, "jobs", refOf(d)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("priorities, delay and dedup", func(t *testing.T) {
		if _, err := c.CreateQueue(ctx, "prio", nil); err != nil {
			t.Fatal(err)
		}
		_, err := c.Enqueue(ctx, "prio",
			&raftqv1.EnqueueMessage{Payload: []byte("later"), DelayMs: 1500, Priority: 9},
			&raftqv1.EnqueueMessage{Payload: []byte("low"), Priority: 1},
			&raftqv1.EnqueueMessage{Payload: []byte("high"), Priority: 5},
		)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.Enqueue(ctx, "prio", &raftqv1.EnqueueMessage{Payload: []byte("once"), DedupId: "x"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Enqueue(ctx, "prio", &raftqv1.EnqueueMessage{Payload: []byte("twice"), DedupId: "x"})
		if err != nil || b[0] != a[0] {
			t.Fatalf("dedup returned %v (%v), want %v", b, err, a)
		}
		start := time.Now()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ds := recvN(t, openLease(t, sctx, n, "prio", 10), 4)
		var got []string
		for _, d := range ds {
			got = append(got, string(d.Payload))
		}
		if want := []string{"high", "low", "once", "later"}; !slices.Equal(got, want) {
			t.Fatalf("order = %v, want %v", got, want)
		}
		if el := time.Since(start); el < time.Second {
			t.Fatalf("delayed message delivered after %v, before its 1.5s delay", el)
		}
	})

	t.Run("consumer helper acks", func(t *testing.T) {
		if _, err := c.CreateQueue(ctx, "work", nil); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string]int{}
		cctx, cancel := context.WithCancel(ctx)
		con := client.NewConsumer(c, "work", func(_ context.Context, d *raftqv1.Delivery) error {
			mu.Lock()
			seen[string(d.Payload)]++
			mu.Unlock()
			return nil
		}, client.ConsumerOptions{MaxInFlight: 8})
		done := make(chan error, 1)
		go func() { done <- con.Run(cctx) }()
		for i := range 50 {
			if _, err := c.EnqueuePayloads(ctx, "work", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		harness.Eventually(t, 20*time.Second, func() error {
			qi, err := c.GetQueue(ctx, "work", false)
			if err != nil {
				return err
			}
			if qi.Stats.AckedTotal != 50 {
				return fmt.Errorf("acked %d of 50", qi.Stats.AckedTotal)
			}
			return nil
		})
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range 50 {
			if seen[fmt.Sprint(i)] != 1 {
				t.Fatalf("message %d handled %d times", i, seen[fmt.Sprint(i)])
			}
		}
	})
}

func TestBadInputGetsClearErrors(t *testing.T) {
	n, c := startSingle(t)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "q", &raftqv1.QueueConfig{MaxMessageBytes: 100}); err != nil {
		t.Fatal(err)
	}
	raw := raftqv1.NewBrokerClient(rawConn(t, n))
	big := make([]byte, 101)
	many := make([]*raftqv1.EnqueueMessage, 1001)
	for i := range many {
		many[i] = &raftqv1.EnqueueMessage{}
	}
	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"empty queue name", func() error { _, err := raw.CreateQueue(ctx, &raftqv1.CreateQueueRequest{}); return err }, codes.InvalidArgument},
		{"long queue name", func() error {
			_, err := raw.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: strings.Repeat("x", 256)})
			return err
		}, codes.InvalidArgument},
		{"bad character", func() error { _, err := raw.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "a b"}); return err }, codes.InvalidArgument},
		{"exists", func() error { _, err := raw.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q"}); return err }, codes.AlreadyExists},
		{"negative visibility", func() error {
			_, err := raw.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "n", Config: &raftqv1.QueueConfig{VisibilityTimeoutMs: -1}})
			return err
		}, codes.InvalidArgument},
		{"unknown queue", func() error {
			_, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "nope", Messages: []*raftqv1.EnqueueMessage{{}}})
			return err
		}, codes.NotFound},
		{"zero messages", func() error { _, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q"}); return err }, codes.InvalidArgument},
		{"oversized batch", func() error {
			_, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: many})
			return err
		}, codes.InvalidArgument},
		{"payload over limit", func() error {
			_, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{Payload: big}}})
			return err
		}, codes.InvalidArgument},
		{"negative delay", func() error {
			_, err := raw.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{DelayMs: -1}}})
			return err
		}, codes.InvalidArgument},
		{"malformed lease token", func() error {
			_, err := raw.Ack(ctx, &raftqv1.AckRequest{Queue: "q", Acks: []*raftqv1.LeaseRef{{MessageId: "zz", LeaseToken: "zz"}}})
			return err
		}, codes.InvalidArgument},
		{"empty ack", func() error { _, err := raw.Ack(ctx, &raftqv1.AckRequest{Queue: "q"}); return err }, codes.InvalidArgument},
		{"negative max_deliveries in update", func() error {
			_, err := raw.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: "q", UpdateMask: nil, Config: &raftqv1.QueueConfig{MaxDeliveries: -3}})
			return err
		}, codes.InvalidArgument},
		{"peek limit", func() error { _, err := raw.Peek(ctx, &raftqv1.PeekRequest{Queue: "q", Limit: 5000}); return err }, codes.InvalidArgument},
		{"delete dlq in use", func() error { _, err := raw.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "q.dlq"}); return err }, codes.FailedPrecondition},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.want {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tc.want)
			}
			if msg := status.Convert(err).Message(); msg == "" {
				t.Fatal("error has no message")
			}
		})
	}
	qi, err := c.GetQueue(ctx, "q", false)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Stats.EnqueuedTotal != 0 || qi.Stats.Ready != 0 {
		t.Fatalf("bad input changed state: %v", qi.Stats)
	}
	if qs, _ := c.ListQueues(ctx, ""); len(qs) != 2 {
		t.Fatalf("queues = %d, want q and q.dlq", len(qs))
	}
	// A stale token on a real message is refused per item and changes nothing.
	ids, err := c.EnqueuePayloads(ctx, "q", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := recvN(t, openLease(t, sctx, n, "q", 1), 1)[0]
	res, err := c.Ack(ctx, "q", &raftqv1.LeaseRef{MessageId: ids[0], LeaseToken: "0000000000000001"})
	if err != nil || res[0].Ok || codes.Code(res[0].Code) != codes.FailedPrecondition {
		t.Fatalf("stale ack = %v, %v", res, err)
	}
	if qi, _ := c.GetQueue(ctx, "q", false); qi.Stats.InFlight != 1 || qi.Stats.AckedTotal != 0 {
		t.Fatalf("stale ack changed state: %v", qi.Stats)
	}
	if res, err := c.Ack(ctx, "q", refOf(d)); err != nil || !res[0].Ok {
		t.Fatalf("real ack = %v, %v", res, err)
	}
}
