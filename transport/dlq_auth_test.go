package transport

import (
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDLQNeedsManageOnIt: a tenant granted manage, produce and consume on
// a.* cannot name another tenant's queue as its dead-letter queue (issue
// 20, hole 1): the call is PERMISSION_DENIED naming that queue, and the
// other queue stays an ordinary queue with its message.
func TestDLQNeedsManageOnIt(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, expect: 1, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	l := c.leader()
	admin := bearer(ctx, testBootstrap)
	if _, err := l.broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: "b.jobs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.broker.Enqueue(admin, &raftqv1.EnqueueRequest{Queue: "b.jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("b's work")}}}); err != nil {
		t.Fatal(err)
	}
	tok := mustToken(t, ctx, l, "tenant-a", 0)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "tenant-a", Pattern: "a.*", Allow: []string{"manage", "produce", "consume"}})
	as := bearer(ctx, tok)

	_, err := l.broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "b.jobs") || !strings.Contains(err.Error(), "manage") {
		t.Fatalf("create a.x with dead_letter_queue b.jobs: %v, want PERMISSION_DENIED naming manage on b.jobs", err)
	}
	info, err := l.broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "b.jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Queue.IsDeadLetterQueue || info.Queue.Stats.GetReady() != 1 || info.Queue.Config.GetDeadLetterQueue() != "b.jobs.dlq" {
		t.Fatalf("b.jobs changed: %v", info.Queue)
	}
	if _, err := l.broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "a.x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a.x exists after the refusal: %v", err)
	}
	// Naming it in an update is refused the same way, before the update
	// itself is judged.
	if _, err := l.broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "a.dlq"}}); err != nil {
		t.Fatalf("a dead-letter queue in its own namespace: %v", err)
	}
	_, err = l.broker.UpdateQueue(as, &raftqv1.UpdateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "b.jobs") {
		t.Fatalf("update a.x naming b.jobs: %v, want PERMISSION_DENIED naming b.jobs", err)
	}
	// Sharing a dead-letter queue in one's own namespace keeps working.
	if _, err := l.broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.y", Config: &raftqv1.QueueConfig{DeadLetterQueue: "a.dlq"}}); err != nil {
		t.Fatalf("sharing a.dlq: %v", err)
	}
	dlq, err := l.broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "a.dlq"})
	if err != nil || !dlq.Queue.IsDeadLetterQueue {
		t.Fatalf("a.dlq: %v %v", dlq, err)
	}
}
