package transport_test

import (
	"context"
	"fmt"
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
	"google.golang.org/protobuf/types/known/fieldmaskpb"
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
	l := c.Leader()
	mustCreate(t, l, "r", &raftqv1.QueueConfig{MaxDeliveries: 5})

	loser := &answerLoser{lose: map[string]bool{
		raftqv1.Broker_Ack_FullMethodName:        true,
		raftqv1.Broker_Nack_FullMethodName:       true,
		raftqv1.Broker_PurgeQueue_FullMethodName: true,
		raftqv1.Broker_Redrive_FullMethodName:    true,
	}}
	cl, err := client.Dial(tctx(t, 10*time.Second), []string{l.Addrs.GRPC},
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
	s, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "r", Limit: 2})
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
			s, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "r", Limit: 1, MaxInFlight: 1})
			if err != nil {
				t.Error(err)
				return
			}
			d := recvN(t, s, 1)[0]
			if _, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "r", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, DeadLetter: true}}}); err != nil {
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
	if _, err := l.Broker.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "r"}); err != nil {
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
	l := c.Leader()
	c.WaitClusterVersion(fsm.DeleteKeyVersion)
	mustCreate(t, l, "d", nil)
	mustEnqueue(t, l, "d", []byte("old"))
	loser := &answerLoser{lose: map[string]bool{raftqv1.Broker_DeleteQueue_FullMethodName: true}}
	loser.between = func(string) {
		mustCreate(t, l, "d", nil)
		mustEnqueue(t, l, "d", []byte("acknowledged"))
	}
	cl, err := client.Dial(tctx(t, 10*time.Second), []string{l.Addrs.GRPC},
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
	l := c.Leader()
	c.WaitClusterVersion(fsm.DeleteKeyVersion - 1)
	mustCreate(t, l, "d", nil)
	ctx := tctx(t, 10*time.Second)
	_, err := l.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "d", IdempotencyKey: "k1"})
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
	if v := l.State().Reader().ClusterVersion(); v != fsm.DeleteKeyVersion-1 {
		t.Fatalf("cluster version %d", v)
	}

	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.DeleteQueue(ctx, "d"); err != nil {
		t.Fatalf("SDK delete on a version-10 cluster: %v", err)
	}
	if _, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "d"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after the SDK's delete: %v, want NOT_FOUND", err)
	}
}

// TestRetriedKeyedWritesAfterALostAnswer (issue 20, retries): every other
// write the SDK retries, through the SDK: the first attempt applies, its
// answer is lost, another client changes the same thing, and the SDK's
// retry arrives with the first attempt's idempotency key. The retry
// answers as the first did (CreateToken: FAILED_PRECONDITION, the secret
// was only in the lost answer) and changes nothing more.
func TestRetriedKeyedWritesAfterALostAnswer(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.WriteKeyVersion)
	ctx := tctx(t, 60*time.Second)
	ac, cc := raftqv1.NewAuthClient(l.Conn), raftqv1.NewClusterClient(l.Conn)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	loser := &answerLoser{lose: map[string]bool{}}
	cl, err := client.Dial(tctx(t, 10*time.Second), []string{l.Addrs.GRPC},
		client.WithDialOptions(grpc.WithUnaryInterceptor(loser.intercept)),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lose := func(method string, between func()) {
		loser.mu.Lock()
		loser.lose[method] = true
		loser.between = func(string) { between() }
		loser.mu.Unlock()
	}
	lost := func() {
		t.Helper()
		loser.mu.Lock()
		defer loser.mu.Unlock()
		if len(loser.lose) != 0 {
			t.Fatalf("an answer was never lost: %v", loser.lose)
		}
	}
	grants := func(identity string) int {
		resp, err := ac.ListAuth(ctx, &raftqv1.ListAuthRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range resp.GetIdentities() {
			if id.GetName() == identity {
				return len(id.GetGrants())
			}
		}
		return 0
	}

	mustCreate(t, l, "u", nil)
	lose(raftqv1.Broker_UpdateQueue_FullMethodName, func() {
		must(l.Broker.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: "u", Config: &raftqv1.QueueConfig{MaxDepth: 20}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_depth"}}}))
	})
	if _, err := cl.UpdateQueue(ctx, "u", &raftqv1.QueueConfig{MaxDepth: 10}, "max_depth"); err != nil {
		t.Fatalf("retried UpdateQueue: %v, want OK", err)
	}
	lost()
	if got := queueInfo(t, l, "u").GetConfig().GetMaxDepth(); got != 20 {
		t.Fatalf("max_depth %d after the retried update; the update made in between set 20", got)
	}

	lose(raftqv1.Broker_CreateQueue_FullMethodName, func() {
		must(l.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "c"}))
	})
	if qi, err := cl.CreateQueue(ctx, "c", nil); err != nil || qi.GetName() != "c" {
		t.Fatalf("retried CreateQueue: %v %v, want OK naming c", qi, err)
	}
	lost()
	if _, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "c"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after the retried create: %v; the queue deleted in between was created again", err)
	}

	lose(raftqv1.Auth_CreateToken_FullMethodName, func() {
		must(ac.RevokeToken(ctx, &raftqv1.RevokeTokenRequest{Name: "ci"}))
	})
	if _, err := cl.CreateToken(ctx, "ci", "", 0); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "revoke ci and create it again") {
		t.Fatalf("retried CreateToken: %v, want FAILED_PRECONDITION saying the secret was lost", err)
	}
	lost()
	if resp, err := ac.ListAuth(ctx, &raftqv1.ListAuthRequest{}); err != nil || len(resp.GetIdentities()) != 0 {
		t.Fatalf("after the retried CreateToken: %v %v; the retry made a second token", resp, err)
	}

	must(ac.CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "ci"}))
	var second string
	lose(raftqv1.Auth_RevokeToken_FullMethodName, func() {
		resp, err := ac.CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "ci"})
		must(resp, err)
		second = resp.GetToken()
	})
	if err := cl.RevokeToken(ctx, "ci"); err != nil {
		t.Fatalf("retried RevokeToken: %v, want OK", err)
	}
	lost()
	if resp, err := ac.ListAuth(ctx, &raftqv1.ListAuthRequest{}); err != nil || len(resp.GetIdentities()) != 1 || second == "" {
		t.Fatalf("after the retried revoke: %v %v; the token created again in between was revoked", resp, err)
	}

	lose(raftqv1.Auth_Grant_FullMethodName, func() {
		must(ac.Ungrant(ctx, &raftqv1.UngrantRequest{Identity: "alice", Pattern: "a.*"}))
	})
	if err := cl.Grant(ctx, "alice", "a.*", "produce"); err != nil {
		t.Fatalf("retried Grant: %v, want OK", err)
	}
	lost()
	if n := grants("alice"); n != 0 {
		t.Fatalf("alice has %d grants after the retried grant; the ungrant in between took it", n)
	}

	must(ac.Grant(ctx, &raftqv1.GrantRequest{Identity: "bob", Pattern: "b.*", Allow: []string{"produce"}}))
	lose(raftqv1.Auth_Ungrant_FullMethodName, func() {
		must(ac.Grant(ctx, &raftqv1.GrantRequest{Identity: "bob", Pattern: "b.*", Allow: []string{"produce"}}))
	})
	if err := cl.Ungrant(ctx, "bob", "b.*", false); err != nil {
		t.Fatalf("retried Ungrant: %v, want OK", err)
	}
	lost()
	if n := grants("bob"); n != 1 {
		t.Fatalf("bob has %d grants after the retried ungrant; the grant in between gave one", n)
	}

	two := int64(200 << 20)
	lose(raftqv1.Cluster_SetClusterSettings_FullMethodName, func() {
		must(cc.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &two}))
	})
	one := int64(100 << 20)
	s, err := cl.SetClusterSettings(ctx, &one)
	if err != nil || s.GetMaxQueuedBytes() != two {
		t.Fatalf("retried SetClusterSettings: %v %v, want OK with the setting made in between (%d)", s, err, two)
	}
	lost()
}

// TestWriteKeysNeedTheirVersion: until every voter applies keyed writes a
// key is refused FAILED_PRECONDITION naming the field and the version, and
// changes nothing; the SDK then sends the write without a key, as before.
func TestWriteKeysNeedTheirVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.WriteKeyVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.WriteKeyVersion - 1)
	ctx := tctx(t, 20*time.Second)
	mustCreate(t, l, "u", nil)
	_, err := l.Broker.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: "u", Config: &raftqv1.QueueConfig{MaxDepth: 10},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_depth"}}, IdempotencyKey: "k1"})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "UpdateQueue.idempotency_key") ||
		!strings.Contains(st.Message(), fmt.Sprintf("log version %d", fsm.WriteKeyVersion)) {
		t.Fatalf("keyed update below the version: %v, want FAILED_PRECONDITION naming the field and version %d", err, fsm.WriteKeyVersion)
	}
	if got := queueInfo(t, l, "u").GetConfig().GetMaxDepth(); got != 0 {
		t.Fatalf("a refused update set max_depth %d", got)
	}
	_, err = raftqv1.NewAuthClient(l.Conn).Grant(ctx, &raftqv1.GrantRequest{Identity: "alice", Pattern: "a.*", Allow: []string{"produce"}, IdempotencyKey: "k2"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "Grant.idempotency_key") {
		t.Fatalf("keyed grant below the version: %v", err)
	}
	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.UpdateQueue(ctx, "u", &raftqv1.QueueConfig{MaxDepth: 10}, "max_depth"); err != nil {
		t.Fatalf("SDK update below the version: %v", err)
	}
	if got := queueInfo(t, l, "u").GetConfig().GetMaxDepth(); got != 10 {
		t.Fatalf("SDK update below the version: max_depth %d", got)
	}
	if err := cl.Grant(ctx, "alice", "a.*", "produce"); err != nil {
		t.Fatalf("SDK grant below the version: %v", err)
	}
}
