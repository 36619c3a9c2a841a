package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
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
	l := c.Leader()
	admin := bearer(ctx, testBootstrap)
	if _, err := l.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: "b.jobs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Broker.Enqueue(admin, &raftqv1.EnqueueRequest{Queue: "b.jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("b's work")}}}); err != nil {
		t.Fatal(err)
	}
	tok := mustToken(t, ctx, l, "tenant-a", 0)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "tenant-a", Pattern: "a.*", Allow: []string{"manage", "produce", "consume"}})
	as := bearer(ctx, tok)

	_, err := l.Broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "b.jobs") || !strings.Contains(err.Error(), "manage") {
		t.Fatalf("create a.x with dead_letter_queue b.jobs: %v, want PERMISSION_DENIED naming manage on b.jobs", err)
	}
	info, err := l.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "b.jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Queue.IsDeadLetterQueue || info.Queue.Stats.GetReady() != 1 || info.Queue.Config.GetDeadLetterQueue() != "b.jobs.dlq" {
		t.Fatalf("b.jobs changed: %v", info.Queue)
	}
	if _, err := l.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "a.x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a.x exists after the refusal: %v", err)
	}
	// Naming it in an update is refused the same way, before the update
	// itself is judged.
	if _, err := l.Broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "a.dlq"}}); err != nil {
		t.Fatalf("a dead-letter queue in its own namespace: %v", err)
	}
	_, err = l.Broker.UpdateQueue(as, &raftqv1.UpdateQueueRequest{Name: "a.x", Config: &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "b.jobs") {
		t.Fatalf("update a.x naming b.jobs: %v, want PERMISSION_DENIED naming b.jobs", err)
	}
	// Sharing a dead-letter queue in one's own namespace keeps working.
	if _, err := l.Broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.y", Config: &raftqv1.QueueConfig{DeadLetterQueue: "a.dlq"}}); err != nil {
		t.Fatalf("sharing a.dlq: %v", err)
	}
	dlq, err := l.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "a.dlq"})
	if err != nil || !dlq.Queue.IsDeadLetterQueue {
		t.Fatalf("a.dlq: %v %v", dlq, err)
	}
}

// TestVersion12ThroughTheAPI: on a cluster at log version 12, through the
// gRPC API: an ordinary queue that holds a message or has a consumer
// attached is not turned into a dead-letter queue (FAILED_PRECONDITION
// naming it; once the consumer is gone it is); max_queues is 10,000 from
// the start, shown by Status, and a create past it is RESOURCE_EXHAUSTED;
// a nack handing a delivery back unprocessed with a delay delays it.
func TestVersion12ThroughTheAPI(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, expect: 1})
	ctx := tctx(t, time.Minute)
	l := c.Leader()
	waitUntil(t, 10*time.Second, "cluster version 12", func() error {
		if v := l.State().Reader().ClusterVersion(); v < fsm.GuardVersion {
			return fmt.Errorf("cluster version %d", v)
		}
		return nil
	})
	create := func(name, dlq string) error {
		_, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Config: &raftqv1.QueueConfig{DeadLetterQueue: dlq}})
		return err
	}
	for _, q := range []string{"b.jobs", "b.idle", "n"} {
		if err := create(q, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "b.jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("work")}}}); err != nil {
		t.Fatal(err)
	}
	if err := create("a.x", "b.jobs"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "b.jobs") {
		t.Fatalf("a queue holding a message as dead-letter queue: %v, want FAILED_PRECONDITION naming it", err)
	}
	lctx, stop := context.WithCancel(ctx)
	if _, err := l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "b.idle", MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	consumers := func(want int) func() error {
		return func() error {
			cs, err := l.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "b.idle"})
			if err != nil || len(cs.Consumers) != want {
				return fmt.Errorf("consumers %v %v, want %d", cs, err, want)
			}
			return nil
		}
	}
	waitUntil(t, 10*time.Second, "the consumer attached", consumers(1))
	if err := create("a.y", "b.idle"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "b.idle") || !strings.Contains(err.Error(), "consumer") {
		t.Fatalf("a queue with a consumer as dead-letter queue: %v, want FAILED_PRECONDITION naming it", err)
	}
	stop()
	waitUntil(t, 10*time.Second, "the consumer gone", consumers(0))
	if err := create("a.y", "b.idle"); err != nil {
		t.Fatalf("an empty queue without consumers as dead-letter queue: %v", err)
	}

	st, err := l.Admin.Status(ctx, &raftqv1.StatusRequest{})
	if err != nil || st.GetSettings().GetMaxQueues() != fsm.DefaultMaxQueues {
		t.Fatalf("Status settings %v (%v), want max_queues %d", st.GetSettings(), err, fsm.DefaultMaxQueues)
	}
	qs, err := l.Broker.ListQueues(ctx, &raftqv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(len(qs.Queues) + 1)
	if resp, err := l.Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueues: &limit}); err != nil || resp.GetSettings().GetMaxQueues() != limit {
		t.Fatalf("SetClusterSettings max_queues: %v %v", resp, err)
	}
	if err := create("c", ""); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_queues") {
		t.Fatalf("a create past max_queues: %v, want RESOURCE_EXHAUSTED naming it", err)
	}
	if err := create("c", "b.jobs.dlq"); err != nil {
		t.Fatalf("one more queue, sharing a dead-letter queue: %v", err)
	}

	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "n", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}}); err != nil {
		t.Fatal(err)
	}
	lctx, stop = context.WithCancel(ctx)
	defer stop()
	s, err := l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "n", MaxInFlight: 1, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := recvN(t, s, 1)[0]
	resp, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "n", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, Unprocessed: true, DelayMs: 60_000}}})
	if err != nil || !resp.Results[0].GetOk() {
		t.Fatalf("nack: %v %v", resp, err)
	}
	info, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "n"})
	if err != nil || info.Queue.Stats.GetDelayed() != 1 || info.Queue.Stats.GetReady() != 0 {
		t.Fatalf("after an unprocessed nack with a delay: %v %v, want the message delayed", info.GetQueue().GetStats(), err)
	}
}
