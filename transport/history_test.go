package transport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func eventKinds(r *raftqv1.GetMessageResponse) []string {
	var out []string
	for _, e := range r.Events {
		out = append(out, e.Kind)
	}
	return out
}

func attemptsOf(d *raftqv1.Delivery) string {
	var out []string
	for _, a := range d.History {
		out = append(out, fmt.Sprintf("%d:%s:%s:%s", a.Attempt, a.Consumer, a.Outcome, a.Reason))
	}
	return strings.Join(out, " ")
}

// leaseOne opens a Lease stream on b named name for one delivery (limit
// 1: the stream is granted nothing more, so ending it releases nothing)
// and takes it; cancel ends the stream.
func leaseOne(t *testing.T, ctx context.Context, b raftqv1.BrokerClient, queue, name string) (*raftqv1.Delivery, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	s, err := b.Lease(ctx, &raftqv1.LeaseRequest{Queue: queue, ConsumerName: name, MaxInFlight: 1, Limit: 1})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return recvN(t, s, 1)[0], cancel
}

// TestGetMessageOverGRPC: a plain gRPC client sees a message's attempts
// and last error on its next delivery, its whole story with GetMessage
// (on the leader and through a follower), the acked message without its
// payload; W3C trace headers pass through to deliveries untouched; a
// reason past 1 KiB, a bad id and an unknown one are refused as the API
// says.
func TestGetMessageOverGRPC(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.Leader()
	ctx := tctx(t, time.Minute)
	mustCreate(t, l, "h", &raftqv1.QueueConfig{VisibilityTimeoutMs: 10_000})
	trace := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
	}
	er, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "h", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("p"), Headers: trace}}})
	if err != nil {
		t.Fatal(err)
	}
	id := er.MessageIds[0]

	d, stop := leaseOne(t, ctx, l.Broker, "h", "worker-a")
	for k, v := range trace {
		if d.Headers[k] != v {
			t.Fatalf("delivery header %s = %q, want %q untouched", k, d.Headers[k], v)
		}
	}
	if d.History != nil || d.LastError != "" {
		t.Fatalf("first delivery has a history: %v %q", d.History, d.LastError)
	}
	long := strings.Repeat("x", fsm.MaxNackReasonBytes+1)
	if _, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "h", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Reason: long}}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("a 1025-byte reason: %v, want INVALID_ARGUMENT naming reason", err)
	}
	nr, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "h", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Reason: "db timeout"}}})
	if err != nil || !nr.Results[0].Ok {
		t.Fatalf("nack: %v %v", nr, err)
	}
	stop()

	d, stop = leaseOne(t, ctx, l.Broker, "h", "worker-b")
	defer stop()
	if got := attemptsOf(d); got != "1:worker-a:nacked:db timeout" || d.LastError != "db timeout" || d.Attempt != 2 {
		t.Fatalf("second delivery: attempt %d history %q last_error %q", d.Attempt, got, d.LastError)
	}
	for k, v := range trace {
		if d.Headers[k] != v {
			t.Fatalf("redelivery header %s = %q, want %q untouched", k, d.Headers[k], v)
		}
	}
	gm, err := l.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "h", MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	if gm.State != "in_flight" || strings.Join(eventKinds(gm), ",") != "enqueued,leased,nacked,leased" || !strings.Contains(gm.Events[2].Detail, "db timeout") {
		t.Fatalf("GetMessage in flight: %s %v %v", gm.State, eventKinds(gm), gm.Events)
	}
	if _, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "h", Acks: []*raftqv1.LeaseRef{refOf(d)}}); err != nil {
		t.Fatal(err)
	}
	c.Synced()
	for _, n := range c.Nodes { // the leader, and followers forwarding
		gm, err := n.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "h", MessageId: id})
		if err != nil {
			t.Fatalf("%s: %v", n.ID, err)
		}
		if gm.State != "acked" || gm.Message.Payload != nil || gm.Message.Headers["traceparent"] != trace["traceparent"] ||
			attemptsOf(gm.Message) != "1:worker-a:nacked:db timeout 2:worker-b:acked:" || gm.Events[len(gm.Events)-1].Detail != "by worker-b" {
			t.Fatalf("%s: GetMessage acked: %v", n.ID, gm)
		}
	}
	if _, err := l.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "h", MessageId: "nonsense"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad id: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := l.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "h", MessageId: "00000000000000ff"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown id: %v, want NOT_FOUND", err)
	}
	if _, err := l.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "nope", MessageId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown queue: %v, want NOT_FOUND", err)
	}
}

// TestHistorySurvivesFailover: a lease granted by leader A is in the
// message's history on the leader after it, once that lease ends there
// (the deposed node releases what it delivered, or it expires), with the
// name A's grant carried into the log; the new leader's own attempt
// follows it.
func TestHistorySurvivesFailover(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	old := c.Leader()
	ctx := tctx(t, time.Minute)
	mustCreate(t, old, "fo", &raftqv1.QueueConfig{VisibilityTimeoutMs: 2000})
	id := mustEnqueue(t, old, "fo", []byte("p"))[0]
	before := time.Now().UnixMilli()
	d, stop := leaseOne(t, ctx, old.Broker, "fo", "worker-on-a")
	defer stop()
	if d.Id != id {
		t.Fatalf("leased %s, want %s", d.Id, id)
	}

	if _, err := old.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{}); err != nil {
		t.Fatalf("TransferLeadership: %v", err)
	}
	nl := c.WaitStable(20 * time.Second)
	if nl == old {
		t.Fatalf("%s still leads", old.ID)
	}
	var gm *raftqv1.GetMessageResponse
	waitUntil(t, 20*time.Second, "the old leader's lease to end on the new leader", func() error {
		var err error
		gm, err = nl.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "fo", MessageId: id})
		if err != nil {
			return err
		}
		if len(gm.Message.History) == 0 {
			return fmt.Errorf("state %s, no attempt ended yet", gm.State)
		}
		return nil
	})
	a := gm.Message.History[0]
	if a.Attempt != 1 || a.Consumer != "worker-on-a" || (a.Outcome != "expired" && a.Outcome != "released") || a.LeasedAtMs < before-1000 {
		t.Fatalf("the old leader's attempt: %+v", a)
	}
	if k := eventKinds(gm); len(k) < 3 || k[1] != "leased" || !strings.Contains(gm.Events[1].Detail, "consumer worker-on-a") {
		t.Fatalf("events after failover: %v", gm.Events)
	}

	d, stop2 := leaseOne(t, ctx, nl.Broker, "fo", "worker-on-b")
	defer stop2()
	if _, err := nl.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "fo", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Reason: "after failover"}}}); err != nil {
		t.Fatal(err)
	}
	gm, err := nl.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "fo", MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := attemptsOf(gm.Message); !strings.HasPrefix(got, "1:worker-on-a:") || !strings.HasSuffix(got, "2:worker-on-b:nacked:after failover") || gm.Message.LastError != "after failover" {
		t.Fatalf("history after the new leader's nack: %q, last_error %q", got, gm.Message.LastError)
	}
	c.Digests() // fails the test if replicas differ
}

// TestGetMessageNeedsVersion: until every voter applies HistoryVersion
// (here every node advertises the version before), GetMessage is refused
// FAILED_PRECONDITION naming it, and deliveries carry no history.
func TestGetMessageNeedsVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.HistoryVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.HistoryVersion - 1)
	ctx := tctx(t, 20*time.Second)
	mustCreate(t, l, "v", nil)
	id := mustEnqueue(t, l, "v", []byte("p"))[0]
	_, err := l.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: "v", MessageId: id})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), fmt.Sprint("log version ", fsm.HistoryVersion)) || !strings.Contains(err.Error(), "GetMessage") {
		t.Fatalf("GetMessage at cluster version %d: %v, want FAILED_PRECONDITION naming GetMessage and log version %d", fsm.HistoryVersion-1, err, fsm.HistoryVersion)
	}
	d, stop := leaseOne(t, ctx, l.Broker, "v", "w")
	if _, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "v", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Reason: "r"}}}); err != nil {
		t.Fatal(err)
	}
	stop()
	d, stop = leaseOne(t, ctx, l.Broker, "v", "w")
	defer stop()
	if d.History != nil || d.LastError != "" {
		t.Fatalf("a delivery at cluster version %d has a history: %v %q", fsm.HistoryVersion-1, d.History, d.LastError)
	}
}

// TestSDKHistory: through the Go SDK, a handler's error is the message's
// last_error and its first attempt's reason on the next delivery (under
// the consumer's name), and Client.GetMessage tells the acked message's
// story.
func TestSDKHistory(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	ctx := tctx(t, time.Minute)
	mustCreate(t, l, "sdk", nil)
	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids, err := cl.Enqueue(ctx, "sdk", &raftqv1.EnqueueMessage{Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *raftqv1.Delivery, 2)
	runCtx, stop := context.WithCancel(ctx)
	con := client.NewConsumer(cl, "sdk", func(ctx context.Context, d *raftqv1.Delivery) error {
		seen <- d
		if d.Attempt == 1 {
			return errors.New("payment gateway said no")
		}
		return nil
	}, client.ConsumerOptions{Name: "billing-1", MaxInFlight: 1})
	done := make(chan error, 1)
	go func() { done <- con.Run(runCtx) }()
	<-seen
	second := <-seen
	if got := attemptsOf(second); got != "1:billing-1:nacked:payment gateway said no" || second.LastError != "payment gateway said no" {
		t.Fatalf("second delivery: %q %q", got, second.LastError)
	}
	var gm *raftqv1.GetMessageResponse
	waitUntil(t, 10*time.Second, "the ack", func() error {
		gm, err = cl.GetMessage(ctx, "sdk", ids[0])
		if err != nil {
			return err
		}
		if gm.State != "acked" {
			return fmt.Errorf("state %s", gm.State)
		}
		return nil
	})
	stop()
	<-done
	if got := attemptsOf(gm.Message); got != "1:billing-1:nacked:payment gateway said no 2:billing-1:acked:" {
		t.Fatalf("GetMessage over the SDK: %q", got)
	}
}
