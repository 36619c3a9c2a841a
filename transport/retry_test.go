package transport

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// answerLoser is a client interceptor that lets the first call of each
// method named in lose reach the node and apply, then reports UNAVAILABLE
// to the SDK instead of the answer: leadership lost after commit, or the
// connection cut, as the SDK sees it. between runs after the lost answer,
// before the retry.
type answerLoser struct {
	mu      sync.Mutex
	lose    map[string]bool
	between func(method string)
}

func (a *answerLoser) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	a.mu.Lock()
	lose := a.lose[method]
	delete(a.lose, method)
	a.mu.Unlock()
	if !lose || err != nil {
		return err
	}
	if a.between != nil {
		a.between(method)
	}
	return status.Error(codes.Unavailable, "test: the answer was lost")
}

// TestRetriesAfterALostAnswer: every mutating call the SDK retries is safe
// to retry (issue 11, item 7). The first attempt applies and its answer is
// lost; the SDK's retry then answers what the first would have: an ack or
// nack OK (not FAILED_PRECONDITION), a purge or redrive the first count,
// without purging or redriving what arrived in between.
func TestRetriesAfterALostAnswer(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.leader()
	mustCreate(t, l, "r", &raftqv1.QueueConfig{MaxDeliveries: 5})

	loser := &answerLoser{lose: map[string]bool{
		raftqv1.Broker_Ack_FullMethodName:        true,
		raftqv1.Broker_Nack_FullMethodName:       true,
		raftqv1.Broker_PurgeQueue_FullMethodName: true,
		raftqv1.Broker_Redrive_FullMethodName:    true,
	}}
	cl, err := client.Dial(tctx(t, 10*time.Second), []string{l.addr},
		client.WithDialOptions(grpc.WithUnaryInterceptor(loser.intercept)),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := tctx(t, 30*time.Second)

	mustEnqueue(t, l, "r", []byte("acked"), []byte("nacked"))
	sctx, closeStream := context.WithCancel(ctx)
	defer closeStream()
	s, err := l.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "r", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 2)
	items, err := cl.Ack(ctx, "r", refOf(ds[0]))
	if err != nil || !items[0].Ok {
		t.Fatalf("retried ack: %v %v; want OK", err, items)
	}
	items, err = cl.Nack(ctx, "r", &raftqv1.NackItem{MessageId: ds[1].Id, LeaseToken: ds[1].LeaseToken, DeadLetter: true})
	if err != nil || !items[0].Ok {
		t.Fatalf("retried nack: %v %v; want OK", err, items)
	}
	if st := queueInfo(t, l, "r").Stats; st.AckedTotal != 1 || st.NackedTotal != 1 || st.DeadLettered != 1 {
		t.Fatalf("stats after retried ack and nack: %v; want each once", st)
	}
	closeStream() // it would lease what comes next

	// Something arrives between the lost answer and the retry: the retry
	// must not act on it.
	loser.between = func(method string) {
		switch method {
		case raftqv1.Broker_PurgeQueue_FullMethodName:
			mustEnqueue(t, l, "r", []byte("after the purge"))
		case raftqv1.Broker_Redrive_FullMethodName:
			mustEnqueue(t, l, "r", []byte("to the DLQ"))
			sctx, closeStream := context.WithCancel(ctx)
			defer closeStream()
			s, err := l.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "r", Limit: 1, MaxInFlight: 1})
			if err != nil {
				t.Error(err)
				return
			}
			d := recvN(t, s, 1)[0]
			if _, err := l.broker.Nack(ctx, &raftqv1.NackRequest{Queue: "r", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, DeadLetter: true}}}); err != nil {
				t.Error(err)
			}
		}
	}
	mustEnqueue(t, l, "r", []byte("p1"), []byte("p2"))
	if n, err := cl.PurgeQueue(ctx, "r"); err != nil || n != 2 {
		t.Fatalf("retried purge: %d, %v; want 2", n, err)
	}
	if st := queueInfo(t, l, "r").Stats; st.Ready != 1 {
		t.Fatalf("ready after a retried purge: %d, want the 1 enqueued after it", st.Ready)
	}
	if _, err := l.broker.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.Redrive(ctx, "r", 0); err != nil || n != 1 {
		t.Fatalf("retried redrive: %d, %v; want 1", n, err)
	}
	st := queueInfo(t, l, "r").Stats
	if st.DeadLettered != 1 || st.RecentSettled == 0 {
		t.Fatalf("after a retried redrive: %v; want the message dead-lettered in between still there, and the outcomes counted", st)
	}
	if len(loser.lose) != 0 {
		t.Fatalf("calls whose answer was never lost: %v", loser.lose)
	}
}

// TestRetriedDeleteAfterALostAnswer is the lost-delete-reply race (issue
// 20, hole 4) through the SDK: the delete applies, its answer is lost,
// someone creates the queue again and enqueues into it, and the SDK's
// retry arrives. It must answer OK and leave the new queue and its
// message alone.
func TestRetriedDeleteAfterALostAnswer(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.leader()
	waitClusterVersion(t, c, fsm.DeleteKeyVersion)
	mustCreate(t, l, "d", nil)
	mustEnqueue(t, l, "d", []byte("old"))
	loser := &answerLoser{lose: map[string]bool{raftqv1.Broker_DeleteQueue_FullMethodName: true}}
	loser.between = func(string) {
		mustCreate(t, l, "d", nil)
		mustEnqueue(t, l, "d", []byte("acknowledged"))
	}
	cl, err := client.Dial(tctx(t, 10*time.Second), []string{l.addr},
		client.WithDialOptions(grpc.WithUnaryInterceptor(loser.intercept)),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.DeleteQueue(tctx(t, 10*time.Second), "d"); err != nil {
		t.Fatalf("retried delete: %v, want OK", err)
	}
	if len(loser.lose) != 0 {
		t.Fatal("the delete's answer was never lost")
	}
	if st := queueInfo(t, l, "d").Stats; st.Ready != 1 {
		t.Fatalf("the queue created after the delete holds %d ready, want its 1 acknowledged message", st.Ready)
	}
}

// TestDeleteKeyNeedsVersion11: until every voter applies log version 11
// (here every node advertises 10, as during a rolling upgrade) a delete
// carrying an idempotency key is refused FAILED_PRECONDITION naming the
// version, with the reason the SDK reads, and deletes nothing; the SDK
// then deletes without a key, as before.
func TestDeleteKeyNeedsVersion11(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.DeleteKeyVersion - 1})
	l := c.leader()
	waitClusterVersion(t, c, fsm.DeleteKeyVersion-1)
	mustCreate(t, l, "d", nil)
	ctx := tctx(t, 10*time.Second)
	_, err := l.broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "d", IdempotencyKey: "k1"})
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "log version 11") || !strings.Contains(st.Message(), "idempotency_key") {
		t.Fatalf("keyed delete at cluster version 10: %v, want FAILED_PRECONDITION naming idempotency_key and log version 11", err)
	}
	var reason string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason() + " " + info.GetMetadata()["needs_version"]
		}
	}
	if reason != "CLUSTER_VERSION 11" {
		t.Fatalf("error details: %q, want reason CLUSTER_VERSION needing 11", reason)
	}
	queueInfo(t, l, "d") // still there
	if v := l.state.ClusterVersion(); v != fsm.DeleteKeyVersion-1 {
		t.Fatalf("cluster version %d", v)
	}

	cl, err := client.Dial(ctx, []string{l.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.DeleteQueue(ctx, "d"); err != nil {
		t.Fatalf("SDK delete on a version-10 cluster: %v", err)
	}
	if _, err := l.broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "d"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after the SDK's delete: %v, want NOT_FOUND", err)
	}
}
