package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// lowerBound is the shortest wait a policy allows after attempt n: the
// delay minus its jitter, less 1 ms for the leader's rounding.
func lowerBound(p *raftqv1.RetryPolicy, n int) time.Duration {
	d := float64(p.InitialDelayMs)
	for range n - 1 {
		d *= p.Multiplier
	}
	d = min(d, float64(p.MaxDelayMs))
	return time.Duration(d*(1-p.Jitter)-1) * time.Millisecond
}

// TestRetryPolicyDelaysRedeliveries: on a real node, through plain gRPC,
// a queue's retry policy delays each redelivery after a nack without a
// delay and after an expired lease: never before the policy's delay minus
// its jitter (measured from before the nack was sent, or before the
// enqueue for an expiry: earlier than the entry's own stamp), and within
// a generous deadline; the message is delayed, not ready, as soon as the
// nack answers; an unprocessed nack is ready at once. The policy shows in
// GetQueue, and a bad one is INVALID_ARGUMENT.
func TestRetryPolicyDelaysRedeliveries(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, expect: 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.RetryVersion)
	ctx := tctx(t, 2*time.Minute)
	policy := &raftqv1.RetryPolicy{InitialDelayMs: 400, MaxDelayMs: 1500, Multiplier: 2, Jitter: 0.2}
	_, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "bad", Config: &raftqv1.QueueConfig{
		Retry: &raftqv1.RetryPolicy{InitialDelayMs: 10, MaxDelayMs: 10, Multiplier: 0.5}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "multiplier") {
		t.Fatalf("a multiplier below 1: %v, want INVALID_ARGUMENT naming it", err)
	}
	if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs", Config: &raftqv1.QueueConfig{
		VisibilityTimeoutMs: 300, MaxDeliveries: 10, Retry: policy}}); err != nil {
		t.Fatal(err)
	}
	if got := queueInfo(t, l, "jobs").GetConfig().GetRetry(); !proto.Equal(got, policy) {
		t.Fatalf("GetQueue retry %v, want %v", got, policy)
	}
	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}}); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	s, err := l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "jobs", MaxInFlight: 1, VisibilityTimeoutMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	const generous = 60 * time.Second
	d := recvN(t, s, 1)[0]
	for n := 1; n <= 3; n++ {
		if d.Attempt != int32(n) {
			t.Fatalf("delivery %d has attempt %d", n, d.Attempt)
		}
		sent := time.Now()
		resp, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "jobs", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Reason: "try later"}}})
		if err != nil || !resp.Results[0].GetOk() {
			t.Fatalf("nack: %v %v", resp, err)
		}
		if st := queueInfo(t, l, "jobs").GetStats(); st.GetDelayed() != 1 {
			t.Fatalf("after nack %d: %v, want the message delayed by the policy", n, st)
		}
		d = recvN(t, s, 1)[0]
		waited := time.Since(sent)
		if low := lowerBound(policy, n); waited < low || waited > generous {
			t.Fatalf("attempt %d redelivered %v after its nack, want at least %v (policy %v)", n+1, waited, low, policy)
		}
		t.Logf("attempt %d: redelivered %v after the nack (policy's least %v)", n+1, waited, lowerBound(policy, n))
	}
	// Unprocessed: ready at once, not counted.
	resp, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "jobs", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Unprocessed: true}}})
	if err != nil || !resp.Results[0].GetOk() {
		t.Fatalf("unprocessed nack: %v %v", resp, err)
	}
	if d = recvN(t, s, 1)[0]; d.Attempt != 4 {
		t.Fatalf("after an unprocessed nack: attempt %d, want 4 again", d.Attempt)
	}
	stop()

	// An expired lease: visibility 300 ms, and the policy's delay after it.
	if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "exp", Config: &raftqv1.QueueConfig{VisibilityTimeoutMs: 300, Retry: policy}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "exp", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}}); err != nil {
		t.Fatal(err)
	}
	lctx, stop = context.WithCancel(ctx)
	defer stop()
	s, err = l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "exp", MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	if first := recvN(t, s, 1)[0]; first.Attempt != 1 {
		t.Fatalf("first delivery attempt %d", first.Attempt)
	}
	again := recvN(t, s, 1)[0] // not settled: its lease expires
	waited := time.Since(start)
	if low := 300*time.Millisecond + lowerBound(policy, 1); again.Attempt != 2 || waited < low || waited > generous {
		t.Fatalf("after an expiry: attempt %d %v after the enqueue, want attempt 2 at least %v", again.Attempt, waited, low)
	}
	t.Logf("after an expiry: redelivered %v after the enqueue (least %v)", waited, 300*time.Millisecond+lowerBound(policy, 1))
}

// TestRetryPolicyThroughTheSDK: the Go SDK creates a queue with a
// policy, replaces it with the update-mask path "retry" and removes it.
func TestRetryPolicyThroughTheSDK(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, expect: 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.RetryVersion)
	ctx := tctx(t, time.Minute)
	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := &raftqv1.RetryPolicy{InitialDelayMs: 1000, MaxDelayMs: 300_000, Multiplier: 2, Jitter: 0.2}
	q, err := cl.CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{MaxDeliveries: 5, Retry: p})
	if err != nil || !proto.Equal(q.GetConfig().GetRetry(), p) {
		t.Fatalf("CreateQueue: %v %v", q.GetConfig(), err)
	}
	p2 := &raftqv1.RetryPolicy{InitialDelayMs: 50, MaxDelayMs: 60, Multiplier: 1}
	if q, err = cl.UpdateQueue(ctx, "jobs", &raftqv1.QueueConfig{Retry: p2}, "retry"); err != nil || !proto.Equal(q.GetConfig().GetRetry(), p2) || q.GetConfig().GetMaxDeliveries() != 5 {
		t.Fatalf("UpdateQueue retry: %v %v", q.GetConfig(), err)
	}
	if _, err = cl.UpdateQueue(ctx, "jobs", &raftqv1.QueueConfig{Retry: &raftqv1.RetryPolicy{InitialDelayMs: 5, MaxDelayMs: 4, Multiplier: 1}}, "retry"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("initial above max: %v, want INVALID_ARGUMENT", err)
	}
	if q, err = cl.GetQueue(ctx, "jobs", false); err != nil || !proto.Equal(q.GetConfig().GetRetry(), p2) {
		t.Fatalf("a refused update changed the policy: %v %v", q.GetConfig(), err)
	}
	if q, err = cl.UpdateQueue(ctx, "jobs", &raftqv1.QueueConfig{}, "retry"); err != nil || q.GetConfig().GetRetry() != nil {
		t.Fatalf("removing the policy: %v %v", q.GetConfig(), err)
	}
}

// TestRetryPolicyNeedsItsVersion: until every voter applies
// fsm.RetryVersion, a create or update setting config.retry is refused
// FAILED_PRECONDITION naming the field and the version, and changes
// nothing (an older replica would keep a policy nobody applies).
func TestRetryPolicyNeedsItsVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.RetryVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.RetryVersion - 1)
	ctx := tctx(t, 30*time.Second)
	want := fmt.Sprint("log version ", fsm.RetryVersion)
	p := &raftqv1.RetryPolicy{InitialDelayMs: 10, MaxDelayMs: 100, Multiplier: 2}
	_, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs", Config: &raftqv1.QueueConfig{Retry: p}})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) || !strings.Contains(st.Message(), "config.retry") {
		t.Fatalf("create with retry: %v, want FAILED_PRECONDITION naming config.retry and %s", err, want)
	}
	mustCreate(t, l, "jobs", nil)
	for _, req := range []*raftqv1.UpdateQueueRequest{
		{Name: "jobs", Config: &raftqv1.QueueConfig{Retry: p}},
		{Name: "jobs", Config: &raftqv1.QueueConfig{}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"retry"}}},
	} {
		_, err := l.Broker.UpdateQueue(ctx, req)
		if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) {
			t.Fatalf("update %v: %v, want FAILED_PRECONDITION naming %s", req, err, want)
		}
	}
	if qi := queueInfo(t, l, "jobs"); qi.GetConfig().GetRetry() != nil {
		t.Fatalf("a refused update set %v", qi.GetConfig().GetRetry())
	}
}
