package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func delivery(id string, lease time.Duration) *raftqv1.Delivery {
	return &raftqv1.Delivery{
		Id:              id,
		Queue:           "q",
		Payload:         []byte(id),
		Attempt:         1,
		LeaseToken:      "tok-" + id,
		LeaseDeadlineMs: time.Now().Add(lease).UnixMilli(),
	}
}

// pushThenHold sends ds on the stream, then holds it open until the client
// closes it.
func pushThenHold(ds ...*raftqv1.Delivery) func(*raftqv1.LeaseRequest, grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
	return func(_ *raftqv1.LeaseRequest, s grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
		if len(ds) > 0 {
			if err := s.Send(&raftqv1.LeaseResponse{Messages: ds}); err != nil {
				return err
			}
		}
		<-s.Context().Done()
		return nil
	}
}

// running starts con.Run and returns a function that stops it and returns
// Run's error, failing the test if Run does not return promptly.
func running(t *testing.T, con *Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- con.Run(ctx) }()
	var stopped bool
	var err error
	stop = func() error {
		t.Helper()
		if stopped {
			return err
		}
		stopped = true
		cancel()
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// settledTokens returns the lease tokens acked and nacked so far.
func settledTokens(calls []call) (acked, nacked []string) {
	for _, c := range calls {
		switch r := c.req.(type) {
		case *raftqv1.AckRequest:
			for _, a := range r.GetAcks() {
				acked = append(acked, a.GetLeaseToken())
			}
		case *raftqv1.NackRequest:
			for _, n := range r.GetNacks() {
				nacked = append(nacked, n.GetLeaseToken())
			}
		}
	}
	slices.Sort(acked)
	slices.Sort(nacked)
	return acked, nacked
}

func nackItems(calls []call) map[string]*raftqv1.NackItem {
	out := map[string]*raftqv1.NackItem{}
	for _, c := range calls {
		if r, ok := c.req.(*raftqv1.NackRequest); ok {
			for _, n := range r.GetNacks() {
				out[n.GetLeaseToken()] = n
			}
		}
	}
	return out
}

func TestConsumerSettlesByHandlerResult(t *testing.T) {
	rec := newRecorder()
	addr := serve(t, &fakeBroker{name: "A", rec: rec, lease: pushThenHold(
		delivery("ok", time.Minute), delivery("fail", time.Minute), delivery("poison", time.Minute))})
	c := dial(t, addr)
	con := NewConsumer(c, "q", func(_ context.Context, d *raftqv1.Delivery) error {
		switch d.GetId() {
		case "fail":
			return errors.New("try later")
		case "poison":
			return DeadLetter(errors.New("cannot parse"))
		}
		return nil
	}, ConsumerOptions{Name: "worker-1", MaxInFlight: 8, VisibilityTimeout: time.Minute, NackDelay: 250 * time.Millisecond})
	stop := running(t, con)

	calls := rec.wait(t, "ack of ok and nacks of fail, poison", func(calls []call) bool {
		acked, nacked := settledTokens(calls)
		return slices.Equal(acked, []string{"tok-ok"}) && slices.Equal(nacked, []string{"tok-fail", "tok-poison"})
	})
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}

	var lease *raftqv1.LeaseRequest
	for _, cl := range calls {
		if r, ok := cl.req.(*raftqv1.LeaseRequest); ok {
			lease = r
		}
	}
	if lease.GetQueue() != "q" || lease.GetConsumerName() != "worker-1" || lease.GetMaxInFlight() != 8 || lease.GetVisibilityTimeoutMs() != 60000 {
		t.Fatalf("lease request = %v", lease)
	}
	nacks := nackItems(calls)
	if n := nacks["tok-fail"]; n.GetDelayMs() != 250 || n.GetReason() != "try later" || n.GetDeadLetter() {
		t.Fatalf("nack of fail = %v", n)
	}
	if n := nacks["tok-poison"]; !n.GetDeadLetter() || n.GetReason() != "cannot parse" {
		t.Fatalf("nack of poison = %v", n)
	}
}

func TestConsumerExtendsLongRunningHandler(t *testing.T) {
	const lease = 300 * time.Millisecond
	rec := newRecorder()
	addr := serve(t, &fakeBroker{name: "A", rec: rec, lease: pushThenHold(delivery("slow", lease))})
	c := dial(t, addr)
	release := make(chan struct{})
	con := NewConsumer(c, "q", func(ctx context.Context, _ *raftqv1.Delivery) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, ConsumerOptions{VisibilityTimeout: lease})
	stop := running(t, con)

	// Three extensions take about 450ms, longer than the lease itself.
	calls := rec.wait(t, "three lease extensions", func(calls []call) bool { return count(calls, "ExtendLease") >= 3 })
	close(release)
	rec.wait(t, "the ack", func(calls []call) bool {
		acked, _ := settledTokens(calls)
		return slices.Equal(acked, []string{"tok-slow"})
	})
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for _, cl := range calls {
		if r, ok := cl.req.(*raftqv1.ExtendLeaseRequest); ok {
			if r.GetExtendByMs() != lease.Milliseconds() || r.GetLeases()[0].GetLeaseToken() != "tok-slow" {
				t.Fatalf("extend request = %v", r)
			}
		}
	}
}

func TestConsumerCancelsHandlerWhenLeaseLost(t *testing.T) {
	rec := newRecorder()
	addr := serve(t, &fakeBroker{name: "A", rec: rec, lease: pushThenHold(delivery("m", 100*time.Millisecond)),
		extend: func(req *raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error) {
			return &raftqv1.ExtendLeaseResponse{Results: []*raftqv1.ItemResult{
				{Code: int32(codes.FailedPrecondition), Error: "stale lease token"},
			}, DeadlinesMs: []int64{0}}, nil
		}})
	c := dial(t, addr)
	cause := make(chan error, 1)
	// The delivery is reported unsettled, so a caller (raftq consume)
	// need not report success for it.
	unsettled := make(chan string, 1)
	con := NewConsumer(c, "q", func(ctx context.Context, _ *raftqv1.Delivery) error {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, ConsumerOptions{Unsettled: func(id string, err error) {
		if errors.Is(err, ErrLeaseLost) {
			unsettled <- id
		}
	}})
	stop := running(t, con)

	select {
	case err := <-cause:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("handler context cause = %v, want ErrLeaseLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not cancelled after the lease was lost")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	calls, _ := rec.snapshot()
	if acked, nacked := settledTokens(calls); len(acked)+len(nacked) != 0 {
		t.Fatalf("settled a lost lease: acked %v nacked %v", acked, nacked)
	}
	select {
	case id := <-unsettled:
		if id != "m" {
			t.Fatalf("Unsettled(%q), want m", id)
		}
	default:
		t.Fatal("the lost lease was not reported to Unsettled")
	}
}

func TestConsumerReconnectsAndKeepsAcking(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end is how the first stream ends; redirect says it points at B.
		end        func(leaderB string) error
		wantServer string
	}{
		{"not leader redirect", func(b string) error { return notLeader(b) }, "B"},
		{"stream EOF", func(string) error { return nil }, "A"},
		{"node unavailable", func(string) error { return status.Error(codes.Unavailable, "shutting down") }, "A"},
		{"no leader", func(string) error { return noLeader() }, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			var streams atomic.Int32
			var leaderB atomic.Value
			lease := func(_ *raftqv1.LeaseRequest, s grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
				if streams.Add(1) == 1 {
					if err := s.Send(&raftqv1.LeaseResponse{Messages: []*raftqv1.Delivery{delivery("old", time.Minute)}}); err != nil {
						return err
					}
					return tc.end(leaderB.Load().(string))
				}
				return pushThenHold(delivery("new", time.Minute))(nil, s)
			}
			leaderB.Store(serve(t, &fakeBroker{name: "B", rec: rec, lease: lease}))
			a := serve(t, &fakeBroker{name: "A", rec: rec, lease: lease})
			c := dial(t, a)

			con := NewConsumer(c, "q", func(ctx context.Context, d *raftqv1.Delivery) error {
				if d.GetId() == "old" {
					// Hold the old delivery across the reconnect.
					if !rec.until(ctx, func(calls []call) bool { return count(calls, "Lease") >= 2 }) {
						return ctx.Err()
					}
				}
				return nil
			}, ConsumerOptions{})
			stop := running(t, con)

			calls := rec.wait(t, "acks of both deliveries", func(calls []call) bool {
				acked, _ := settledTokens(calls)
				return slices.Equal(acked, []string{"tok-new", "tok-old"})
			})
			if err := stop(); err != nil {
				t.Fatalf("Run = %v", err)
			}
			var leaseServers []string
			for _, cl := range calls {
				if cl.method == "Lease" {
					leaseServers = append(leaseServers, cl.server)
				}
			}
			if len(leaseServers) != 2 || leaseServers[0] != "A" || leaseServers[1] != tc.wantServer {
				t.Fatalf("streams opened on %v, want [A %s]", leaseServers, tc.wantServer)
			}
		})
	}
}

func TestConsumerShutdownSettlesBeforeClosingStream(t *testing.T) {
	rec := newRecorder()
	addr := serve(t, &fakeBroker{name: "A", rec: rec,
		lease: func(_ *raftqv1.LeaseRequest, s grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
			err := s.Send(&raftqv1.LeaseResponse{Messages: []*raftqv1.Delivery{
				delivery("d1", time.Minute), delivery("d2", time.Minute), delivery("d3", time.Minute),
			}})
			if err != nil {
				return err
			}
			<-s.Context().Done()
			rec.add("A", "stream-closed", nil)
			return nil
		}})
	c := dial(t, addr)
	started := make(chan struct{})
	var handled atomic.Int32
	con := NewConsumer(c, "q", func(ctx context.Context, d *raftqv1.Delivery) error {
		handled.Add(1)
		close(started) // only d1 ever starts: one handler, cancelled while busy
		<-ctx.Done()
		return ctx.Err()
	}, ConsumerOptions{Concurrency: 1, NackDelay: time.Second})
	stop := running(t, con)

	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	calls := rec.wait(t, "the stream to close", func(calls []call) bool { return count(calls, "stream-closed") == 1 })
	if handled.Load() != 1 {
		t.Fatalf("handler ran %d times after cancel, want 1", handled.Load())
	}
	acked, _ := settledTokens(calls)
	if len(acked) != 0 {
		t.Fatalf("acked %v after cancel", acked)
	}
	// d1's handler failed: nacked with the configured delay. d2 and d3 are
	// handed back at once if the consumer had taken them in before the
	// cancel; otherwise the broker releases them when the stream closes.
	nacks := nackItems(calls)
	if n := nacks["tok-d1"]; n.GetDelayMs() != 1000 {
		t.Fatalf("nack of d1 = %v", n)
	}
	for tok, n := range nacks {
		if tok != "tok-d1" && (n.GetDelayMs() != 0 || n.GetReason() != "consumer stopped") {
			t.Fatalf("hand-back of %s = %v", tok, n)
		}
	}
	// Settling happens before the stream closes, or the broker would release
	// the leases first and refuse the acks.
	if last := calls[len(calls)-1]; last.method != "stream-closed" {
		t.Fatalf("calls end with %s, want stream-closed: %v", last.method, describe(calls))
	}
}

func TestConsumerStopsOnFinalStreamError(t *testing.T) {
	for _, code := range []codes.Code{codes.NotFound, codes.InvalidArgument} {
		t.Run(code.String(), func(t *testing.T) {
			addr := serve(t, &fakeBroker{name: "A", rec: newRecorder(),
				lease: func(*raftqv1.LeaseRequest, grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
					return status.Error(code, "no such queue")
				}})
			c := dial(t, addr)
			con := NewConsumer(c, "q", func(context.Context, *raftqv1.Delivery) error { return nil }, ConsumerOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := con.Run(ctx)
			if status.Code(err) != code {
				t.Fatalf("Run = %v, want code %v", err, code)
			}
		})
	}
}

func TestConsumerRejectsBadSetup(t *testing.T) {
	c := dial(t, deadAddr(t))
	h := func(context.Context, *raftqv1.Delivery) error { return nil }
	for _, tc := range []struct {
		name string
		con  *Consumer
	}{
		{"nil client", NewConsumer(nil, "q", h, ConsumerOptions{})},
		{"nil handler", NewConsumer(c, "q", nil, ConsumerOptions{})},
		{"no queue", NewConsumer(c, "", h, ConsumerOptions{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.con.Run(context.Background()); err == nil {
				t.Fatal("Run succeeded")
			}
		})
	}
}

func TestConsumerBatchesAcks(t *testing.T) {
	const n = 200
	var ds []*raftqv1.Delivery
	for i := range n {
		ds = append(ds, delivery(fmt.Sprint(i), time.Minute))
	}
	rec := newRecorder()
	addr := serve(t, &fakeBroker{name: "A", rec: rec, lease: pushThenHold(ds...)})
	c := dial(t, addr)
	con := NewConsumer(c, "q", func(context.Context, *raftqv1.Delivery) error { return nil }, ConsumerOptions{MaxInFlight: n})
	stop := running(t, con)
	calls := rec.wait(t, "all acks", func(calls []call) bool {
		acked, _ := settledTokens(calls)
		return len(acked) == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if acks := count(calls, "Ack"); acks >= n {
		t.Fatalf("%d Ack calls for %d messages: no batching", acks, n)
	}
}

func TestConsumerFailsOverToLearnedNode(t *testing.T) {
	rec := newRecorder()
	var addrB atomic.Value
	var aDown atomic.Bool
	b := &fakeBroker{name: "B", rec: rec, lease: pushThenHold(delivery("new", time.Minute))}
	addrB.Store(serve(t, b))
	a := &fakeBroker{name: "A", rec: rec,
		members: func() []string { return []string{addrB.Load().(string)} },
		unary: func(string) error {
			if aDown.Load() {
				return status.Error(codes.Unavailable, "A is down")
			}
			return nil
		},
		lease: func(_ *raftqv1.LeaseRequest, s grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
			if aDown.Swap(true) {
				return status.Error(codes.Unavailable, "A is down")
			}
			if err := s.Send(&raftqv1.LeaseResponse{Messages: []*raftqv1.Delivery{delivery("old", time.Minute)}}); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "A is going down")
		}}
	// The only seed is A; B is known only from A's cluster status.
	c := dial(t, serve(t, a))
	con := NewConsumer(c, "q", func(context.Context, *raftqv1.Delivery) error { return nil }, ConsumerOptions{})
	stop := running(t, con)
	rec.wait(t, "acks of both deliveries on B", func(calls []call) bool {
		n := 0
		for _, cl := range calls {
			if r, ok := cl.req.(*raftqv1.AckRequest); ok && cl.server == "B" {
				n += len(r.GetAcks())
			}
		}
		return n == 2
	})
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
}
