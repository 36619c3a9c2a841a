package auth

import (
	"context"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestAuthorizeFailsClosed: a handler reached without a principal (one
// mounted without the middleware) is refused, whatever the mode and the
// method; with the middleware's principal the usual rules decide.
func TestAuthorizeFailsClosed(t *testing.T) {
	f := stateWith(t, 0)
	for _, mode := range []Mode{ModeNone, ModeToken, ModeMTLS} {
		a := New(Config{Mode: mode, State: f.Reader().Auth})
		for _, c := range []struct {
			method string
			req    any
		}{
			{raftqv1.Broker_GetQueue_FullMethodName, &raftqv1.GetQueueRequest{Name: "jobs.a"}},
			{raftqv1.Broker_Redrive_FullMethodName, &raftqv1.RedriveRequest{Queue: "jobs.a"}},
			{raftqv1.Cluster_Verify_FullMethodName, &raftqv1.VerifyRequest{}},
			{raftqv1.Broker_ListQueues_FullMethodName, &raftqv1.ListQueuesRequest{}},
		} {
			if err := a.Authorize(context.Background(), c.method, c.req); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s: Authorize(%s) without a principal: %v, want PERMISSION_DENIED", mode, c.method, err)
			}
		}
	}
	a := New(Config{Mode: ModeToken, State: f.Reader().Auth})
	alice := WithPrincipal(context.Background(), &Principal{Name: "alice", Kind: KindToken})
	if err := a.Authorize(alice, raftqv1.Broker_Enqueue_FullMethodName, &raftqv1.EnqueueRequest{Queue: "jobs.a"}); err != nil {
		t.Errorf("alice may produce on jobs.a: %v", err)
	}
	if err := a.Authorize(alice, raftqv1.Broker_GetQueue_FullMethodName, &raftqv1.GetQueueRequest{Name: "jobs.a"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice may not browse jobs.a: %v", err)
	}
	anon := WithPrincipal(context.Background(), New(Config{}).anonymous)
	if err := New(Config{}).Authorize(anon, raftqv1.Cluster_Verify_FullMethodName, &raftqv1.VerifyRequest{}); err != nil {
		t.Errorf("auth off, the middleware's anonymous admin: %v", err)
	}
}

// TestSecondQueueNeedsItsPermission: a request field that names a second
// queue (config.dead_letter_queue) is checked against that queue's grants
// too, and the refusal names it; an update whose mask leaves the field
// out ignores it.
func TestSecondQueueNeedsItsPermission(t *testing.T) {
	f := stateWith(t, 0)
	grant := &fsmv1.Command{Version: 5, NowMs: 1000, Op: &fsmv1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{Identity: "tenant-a", Pattern: "a.*", Perms: uint32(fsm.PermManage | fsm.PermProduce | fsm.PermConsume)}}}
	if err := f.ApplyCommand(f.Reader().AppliedIndex()+1, grant).Failure(); err != nil {
		t.Fatal(err)
	}
	a := New(Config{Mode: ModeToken, State: f.Reader().Auth})
	p := &Principal{Name: "tenant-a", Kind: KindToken}
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	for _, c := range []struct {
		name   string
		method string
		req    any
		deny   string // the queue a refusal names; "" = allowed
	}{
		{"create names another tenant's queue", raftqv1.Broker_CreateQueue_FullMethodName,
			&raftqv1.CreateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}}, "b.jobs"},
		{"update names it", raftqv1.Broker_UpdateQueue_FullMethodName,
			&raftqv1.UpdateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}}, "b.jobs"},
		{"update names it in its mask", raftqv1.Broker_UpdateQueue_FullMethodName,
			&raftqv1.UpdateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}, UpdateMask: mask("max_deliveries", "dead_letter_queue")}, "b.jobs"},
		{"update's mask leaves it out", raftqv1.Broker_UpdateQueue_FullMethodName,
			&raftqv1.UpdateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs", MaxDeliveries: 3}, UpdateMask: mask("max_deliveries")}, ""},
		{"the addressed queue is checked first", raftqv1.Broker_CreateQueue_FullMethodName,
			&raftqv1.CreateQueueRequest{Name: "b.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "a.dlq"}}, "b.x"},
		{"a dead-letter queue in its own namespace", raftqv1.Broker_CreateQueue_FullMethodName,
			&raftqv1.CreateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "a.dlq"}}, ""},
		{"the default dead-letter queue", raftqv1.Broker_CreateQueue_FullMethodName,
			&raftqv1.CreateQueueRequest{Name: "a.x"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := WithPrincipal(context.Background(), p)
			err := a.Authorize(ctx, c.method, c.req)
			if c.deny == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "manage permission on queue "+c.deny) {
				t.Fatalf("%v, want PERMISSION_DENIED naming manage on %s", err, c.deny)
			}
		})
	}
}

// TestSettingsAuditTarget: the audit line of a SetClusterSettings names
// every setting it changes (it named max_queued_bytes alone).
func TestSettingsAuditTarget(t *testing.T) {
	mq, n, g, r := int64(1<<30), int64(50), uint32(3), uint32(5)
	for _, tc := range []struct {
		req  *raftqv1.SetClusterSettingsRequest
		want string
	}{
		{&raftqv1.SetClusterSettingsRequest{}, ""},
		{&raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &mq}, "max_queued_bytes=1073741824"},
		{&raftqv1.SetClusterSettingsRequest{MaxQueues: &n, Groups: &g}, "max_queues=50 groups=3"},
		{&raftqv1.SetClusterSettingsRequest{Replicas: &r}, "replicas=5"},
	} {
		if got := byIdentity(tc.req); got != tc.want {
			t.Errorf("target of %v = %q, want %q", tc.req, got, tc.want)
		}
	}
}
