package transport_test

// Issue 11 item 1: an attempt counts only for a delivery that was, or may
// have been, handed to a consumer. These in-process tests cover the races
// around a stream's end that used to burn attempts.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
)

// sentCounter is a client stats handler counting the request messages of
// one method that have been written to the connection.
type sentCounter struct {
	method string
	n      atomic.Int64
}

type methodKey struct{}

func (h *sentCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (h *sentCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutPayload); ok && ctx.Value(methodKey{}) == h.method {
		h.n.Add(1)
	}
}

func (h *sentCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h *sentCounter) HandleConn(context.Context, stats.ConnStats)                       {}

// TestAcksRacingStreamCloseApplyFirst: a plain gRPC consumer acks every
// delivery asynchronously (one Ack call each) and closes its Lease stream
// as soon as the acks are sent, without waiting for their answers. The
// release proposed on close must not overtake those acks: every ack
// answers OK, every message is acked once and none comes back with an
// attempt counted.
func TestAcksRacingStreamCloseApplyFirst(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	sent := &sentCounter{method: raftqv1.Broker_Ack_FullMethodName}
	conn, err := grpc.NewClient(l.Addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(sent))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bc := raftqv1.NewBrokerClient(conn)
	ctx := tctx(t, time.Minute)
	const n = 400
	mustCreate(t, l, "acks", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprint(i))
	}
	mustEnqueue(t, l, "acks", payloads...)

	sctx, closeStream := context.WithCancel(ctx)
	defer closeStream()
	s, err := bc.Lease(sctx, &raftqv1.LeaseRequest{Queue: "acks", MaxInFlight: n})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, n)
	type answer struct {
		id   string
		resp *raftqv1.AckResponse
		err  error
	}
	answers := make(chan answer, n)
	for _, d := range ds {
		go func() {
			resp, err := bc.Ack(ctx, &raftqv1.AckRequest{Queue: "acks", Acks: []*raftqv1.LeaseRef{refOf(d)}})
			answers <- answer{d.Id, resp, err}
		}()
	}
	waitUntil(t, 10*time.Second, "every ack to be sent", func() error {
		if got := sent.n.Load(); got < n {
			return fmt.Errorf("%d of %d sent", got, n)
		}
		return nil
	})
	closeStream() // at once: most acks are still unanswered
	refused := 0
	for range n {
		a := <-answers
		if a.err != nil {
			t.Errorf("ack %s: %v", a.id, a.err)
			continue
		}
		if r := a.resp.Results[0]; !r.Ok {
			refused++
			if refused <= 3 {
				t.Errorf("ack %s refused: %v", a.id, r.Error)
			}
		}
	}
	if refused > 0 {
		t.Errorf("%d of %d acks sent before the stream closed were refused", refused, n)
	}
	waitUntil(t, 10*time.Second, "the consumer to be gone", func() error {
		q := queueInfo(t, l, "acks")
		if q.Stats.Consumers != 0 || q.Stats.InFlight != 0 {
			return fmt.Errorf("stats %v", q.Stats)
		}
		return nil
	})
	if st := queueInfo(t, l, "acks").Stats; st.AckedTotal != n || st.Ready != 0 || st.DeadLettered != 0 || st.ExpiredTotal != 0 {
		t.Fatalf("stats %v, want all %d acked and nothing returned", st, n)
	}
}

// TestFailoverHandsBackUnsentDeliveries: a leader whose consumer holds
// granted deliveries it never took from its buffer loses leadership
// (TransferLeadership). The deposed node, still alive, knows those were
// never sent: it hands them back to the new leader as unprocessed, so they
// are ready again at once with no attempt counted — not left to expire
// there after the lease grace as counted attempts (with max_deliveries=1:
// dead-lettered without ever reaching a worker).
func TestFailoverHandsBackUnsentDeliveries(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	old := c.Leader()
	ctx := tctx(t, time.Minute)
	const n = 5
	mustCreate(t, old, "fo", &raftqv1.QueueConfig{VisibilityTimeoutMs: 1000, MaxDeliveries: 1})
	cons, err := old.Host.Broker().Lease(ctx, scheduler.ConsumerRequest{Queue: "fo", Name: "buffered", MaxInFlight: n})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprint(i))
	}
	ids := mustEnqueue(t, old, "fo", payloads...)
	waitUntil(t, 10*time.Second, "the deliveries to be granted and buffered", func() error {
		if got := cons.Buffered(); got != n {
			return fmt.Errorf("%d of %d buffered", got, n)
		}
		return nil
	})

	if _, err := old.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{}); err != nil {
		t.Fatalf("TransferLeadership: %v", err)
	}
	select {
	case <-cons.Done():
	case <-ctx.Done():
		t.Fatal("the consumer did not end when leadership moved")
	}
	nl := c.WaitStable(20 * time.Second)
	if nl == old {
		t.Fatalf("%s still leads", old.ID)
	}
	waitUntil(t, 20*time.Second, "the unsent deliveries to be ready again", func() error {
		st := queueInfo(t, nl, "fo").Stats
		if st.DeadLettered != 0 || st.ExpiredTotal != 0 {
			t.Fatalf("deliveries never sent expired as counted attempts: stats %v", st)
		}
		if st.Ready != n || st.InFlight != 0 {
			return fmt.Errorf("stats %v", st)
		}
		return nil
	})
	pk, err := nl.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "fo", Limit: n})
	if err != nil || len(pk.Messages) != n {
		t.Fatalf("Peek = %v, %v", pk, err)
	}
	for i, d := range pk.Messages {
		if d.Id != ids[i] || d.Attempt != 0 {
			t.Fatalf("message %d = %s attempt %d, want %s attempt 0", i, d.Id, d.Attempt, ids[i])
		}
	}
}
