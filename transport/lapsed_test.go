package transport_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc"
)

// blockingLeaseStream is a Lease stream whose first Send blocks until
// release closes, as a slow client's does once HTTP/2 flow control stops
// it; every Send checks, at that moment, that each delivery's lease is
// still held under its token by the consumer, on the leader's state.
type blockingLeaseStream struct {
	grpc.ServerStream
	ctx     context.Context
	state   *fsm.FSM
	holder  func() string
	queue   string
	blocked chan struct{} // closed when the first Send blocks
	release chan struct{}

	mu    sync.Mutex
	sends int
	sent  []*raftqv1.Delivery
	stale []string // deliveries sent while their lease was not current
}

func (s *blockingLeaseStream) Context() context.Context { return s.ctx }

func (s *blockingLeaseStream) Send(r *raftqv1.LeaseResponse) error {
	s.mu.Lock()
	for _, d := range r.GetMessages() {
		id, _ := transport.ParseID(d.GetId())
		tok, _ := transport.ParseID(d.GetLeaseToken())
		var holder string
		var token uint64
		var ok bool
		s.state.Reader().Read(func(v fsm.View) { holder, token, ok = v.Lease(s.queue, id) })
		if !ok || token != tok || holder != s.holder() {
			s.stale = append(s.stale, fmt.Sprintf("message %s token %s (lease held %v by %q under %d)", d.GetId(), d.GetLeaseToken(), ok, holder, token))
		}
		s.sent = append(s.sent, d)
	}
	s.sends++
	first := s.sends == 1
	s.mu.Unlock()
	if first {
		close(s.blocked)
		select {
		case <-s.release:
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
	return nil
}

func (s *blockingLeaseStream) snapshot() (sent []*raftqv1.Delivery, stale []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*raftqv1.Delivery(nil), s.sent...), append([]string(nil), s.stale...)
}

// TestSlowStreamSendsNoLapsedDelivery (issue 20, hole 3): a Lease stream
// stuck in Send (a slow client) while the next delivery waits for it.
// That delivery's lease lapses before the stream can send it; it must
// never be sent under that lease (the message may be another consumer's
// by then), and since nobody was sent it, it comes back uncounted: when
// it is sent at last, under a new lease, it is its first attempt.
func TestSlowStreamSendsNoLapsedDelivery(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	ctx := tctx(t, time.Minute)
	mustCreate(t, l, "slow", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
	cons, err := l.Host.Broker().Lease(ctx, scheduler.ConsumerRequest{Queue: "slow", Name: "slow", MaxInFlight: 2, VisibilityTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ids := mustEnqueue(t, l, "slow", []byte("first"), []byte("second"))
	second, _ := transport.ParseID(ids[1])
	var token0 uint64
	waitUntil(t, 10*time.Second, "both messages to be granted", func() error {
		var ok bool
		l.State().Reader().Read(func(v fsm.View) { _, token0, ok = v.Lease("slow", second) })
		if st := queueInfo(t, l, "slow").Stats; st.InFlight != 2 || !ok {
			return fmt.Errorf("stats %v", st)
		}
		return nil
	})

	sctx, stop := context.WithCancel(ctx)
	stream := &blockingLeaseStream{
		ctx: sctx, state: l.State(), holder: cons.ID, queue: "slow",
		blocked: make(chan struct{}), release: make(chan struct{}),
	}
	pushed := make(chan error, 1)
	// max_batch_bytes 1: one delivery per response, so the second waits
	// while the first one's Send blocks.
	go func() { pushed <- transport.Push(sctx, l.API(), stream, cons, 1) }()
	defer func() {
		stop()
		<-pushed
	}()
	<-stream.blocked
	waitUntil(t, 20*time.Second, "the second message's lease to lapse and end", func() error {
		var token uint64
		var ok bool
		l.State().Reader().Read(func(v fsm.View) { _, token, ok = v.Lease("slow", second) })
		if ok && token == token0 {
			return fmt.Errorf("still leased under %d", token0)
		}
		return nil
	})
	close(stream.release)
	var got *raftqv1.Delivery
	waitUntil(t, 20*time.Second, "the second message to be sent", func() error {
		sent, _ := stream.snapshot()
		for _, d := range sent {
			if d.GetId() == ids[1] {
				got = d
				return nil
			}
		}
		return fmt.Errorf("sent %d deliveries, none of %s", len(sent), ids[1])
	})
	if _, stale := stream.snapshot(); len(stale) > 0 {
		t.Fatalf("sent deliveries whose lease had ended: %v", stale)
	}
	if got.GetAttempt() != 1 {
		t.Fatalf("the second message was sent at attempt %d, want 1: its lapsed lease was never sent, so it must not count", got.GetAttempt())
	}
}

// TestLeaseRemainingReported (issue 20, hole 7): deliveries and extensions
// say how long their lease has left, on the leader's clock, so that a
// client reckons from receipt on its own clock and never compares the
// leader's deadline with a clock that may be skewed.
func TestLeaseRemainingReported(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	ctx := tctx(t, time.Minute)
	const vis = 60_000
	mustCreate(t, l, "remain", &raftqv1.QueueConfig{VisibilityTimeoutMs: vis})
	mustEnqueue(t, l, "remain", []byte("x"))
	s, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "remain", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := recvN(t, s, 1)[0]
	if r := d.GetLeaseRemainingMs(); r <= 0 || r > vis {
		t.Fatalf("delivery lease_remaining_ms = %d, want in (0, %d]", r, vis)
	}
	const by = 120_000
	resp, err := l.Broker.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Queue: "remain", Leases: []*raftqv1.LeaseRef{refOf(d)}, ExtendByMs: by})
	if err != nil || !resp.GetResults()[0].GetOk() {
		t.Fatalf("extend: %v %v", resp, err)
	}
	if rs := resp.GetRemainingMs(); len(rs) != 1 || rs[0] <= vis || rs[0] > by {
		t.Fatalf("extension remaining_ms = %v, want one value in (%d, %d]", rs, vis, by)
	}
	if _, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "remain", Acks: []*raftqv1.LeaseRef{refOf(d)}}); err != nil {
		t.Fatal(err)
	}
}
