package transport

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
)

// brokerService serves the Broker API on a Server: each handler checks its
// input and calls the broker's operation (routing is the Server's
// interceptor's job). It is its own type so that the Server keeps its
// lifecycle and routing and stays small.
type brokerService struct {
	raftqv1.UnimplementedBrokerServer
	*Server
}

// Request limits that are not per-queue settings.
const (
	MaxBatch     = 1000 // messages per Enqueue, items per Ack/Nack/Extend
	MaxPeekLimit = 1000
	DefaultPeek  = 10
	MaxInFlight  = 10_000
	maxReasonLen = fsm.MaxNackReasonBytes // kept with the message (its history)
)

func checkQueueName(field, name string) error {
	if err := fsm.ValidateQueueName(name); err != nil {
		return invalid("%s: %v", field, err)
	}
	return nil
}

// checkNewQueueName is checkQueueName for a name about to be created: it
// may not start with '-', which every command line takes for a flag.
// Queues so named before this rule stay usable (after "--" on a command
// line).
func checkNewQueueName(field, name string) error {
	if err := checkQueueName(field, name); err != nil {
		return err
	}
	if strings.HasPrefix(name, "-") {
		return invalid("%s: queue name %q starts with '-', which command lines read as a flag; start it with a letter, digit, '.' or '_'", field, name)
	}
	return nil
}

// checkNewDLQ applies checkNewQueueName to a config's dead-letter queue.
func checkNewDLQ(cfg *raftqv1.QueueConfig) error {
	if dlq := cfg.GetDeadLetterQueue(); dlq != "" {
		return checkNewQueueName("config.dead_letter_queue", dlq)
	}
	return nil
}

// checkIdempotencyKey refuses a key no record could hold.
func checkIdempotencyKey(key string) error {
	if len(key) > fsm.MaxDedupIDLen {
		return invalid("idempotency_key is longer than %d bytes", fsm.MaxDedupIDLen)
	}
	return nil
}

func (s brokerService) CreateQueue(ctx context.Context, req *raftqv1.CreateQueueRequest) (*raftqv1.CreateQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkNewQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	if err := checkNewDLQ(req.GetConfig()); err != nil {
		return nil, err
	}
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	qi, err := g.b.Queues().Keyed(req.GetIdempotencyKey()).CreateQueue(ctx, req.Name, req.Config)
	if err != nil {
		return nil, err
	}
	return &raftqv1.CreateQueueResponse{Queue: g.project(qi)}, nil
}

func (s brokerService) UpdateQueue(ctx context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.UpdateQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	mask := req.GetUpdateMask().GetPaths()
	if err := fsm.ValidateMask(mask); err != nil {
		return nil, err
	}
	if slices.Contains(mask, "dead_letter_queue") || len(mask) == 0 {
		if err := checkNewDLQ(req.GetConfig()); err != nil {
			return nil, err
		}
	}
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	qi, err := g.b.Queues().Keyed(req.GetIdempotencyKey()).UpdateQueue(ctx, req.Name, req.Config, mask)
	if err != nil {
		return nil, err
	}
	return &raftqv1.UpdateQueueResponse{Queue: g.project(qi)}, nil
}

func (s brokerService) DeleteQueue(ctx context.Context, req *raftqv1.DeleteQueueRequest) (*raftqv1.DeleteQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	if len(req.IdempotencyKey) > fsm.MaxDedupIDLen {
		return nil, invalid("idempotency_key is longer than %d bytes", fsm.MaxDedupIDLen)
	}
	if err := g.b.Queues().DeleteQueue(ctx, req.Name, broker.DeleteConditions{IfEmpty: req.IfEmpty, IfUnused: req.IfUnused}, req.IdempotencyKey); err != nil {
		return nil, err
	}
	return &raftqv1.DeleteQueueResponse{}, nil
}

func (s brokerService) GetQueue(ctx context.Context, req *raftqv1.GetQueueRequest) (*raftqv1.GetQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	qi, err := g.b.Queues().GetQueue(req.Name, req.IncludeKeys)
	if err != nil {
		return nil, err
	}
	return &raftqv1.GetQueueResponse{Queue: g.project(qi)}, nil
}

func (s brokerService) ListConsumers(ctx context.Context, req *raftqv1.ListConsumersRequest) (*raftqv1.ListConsumersResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	cs, err := g.b.Queues().ListConsumers(req.Queue)
	if err != nil {
		return nil, err
	}
	out := &raftqv1.ListConsumersResponse{Consumers: make([]*raftqv1.ConsumerInfo, len(cs))}
	for i, c := range cs {
		out.Consumers[i] = projectConsumer(c)
	}
	return out, nil
}

func (s brokerService) ListQueues(ctx context.Context, req *raftqv1.ListQueuesRequest) (*raftqv1.ListQueuesResponse, error) {
	g := s.callGroup(ctx)
	if len(req.GetPrefix()) > fsm.MaxQueueNameLen {
		return nil, invalid("prefix is longer than %d characters", fsm.MaxQueueNameLen)
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size is %d; it must not be negative (0 = every queue)", req.GetPageSize())
	}
	var qs []*raftqv1.QueueInfo
	for _, q := range g.b.Queues().ListQueues(req.GetPrefix()) {
		qs = append(qs, g.project(q))
	}
	// Paged over what the caller may see (as the answer is filtered),
	// so that a page is full and its token names a queue it saw.
	all := s.cfg.Auth.Filter(ctx, &raftqv1.ListQueuesResponse{Queues: qs}).(*raftqv1.ListQueuesResponse).GetQueues()
	page, next := pageQueues(all, req.GetPageToken(), int(req.GetPageSize()))
	return &raftqv1.ListQueuesResponse{Queues: page, NextPageToken: next}, nil
}

func (s brokerService) PurgeQueue(ctx context.Context, req *raftqv1.PurgeQueueRequest) (*raftqv1.PurgeQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	if len(req.IdempotencyKey) > fsm.MaxDedupIDLen {
		return nil, invalid("idempotency_key is longer than %d bytes", fsm.MaxDedupIDLen)
	}
	n, err := g.b.Queues().PurgeQueue(ctx, req.Name, req.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	return &raftqv1.PurgeQueueResponse{Purged: n}, nil
}

// checkPause is what PauseQueue and ResumeQueue check before anything:
// the queue's name and the key's length.
func checkPause(name, key string) error {
	if err := checkQueueName("name", name); err != nil {
		return err
	}
	if len(key) > fsm.MaxKeyLen {
		return invalid("fairness_key is %d bytes, the limit is %d", len(key), fsm.MaxKeyLen)
	}
	return nil
}

func (s brokerService) PauseQueue(ctx context.Context, req *raftqv1.PauseQueueRequest) (*raftqv1.PauseQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkPause(req.GetName(), req.GetFairnessKey()); err != nil {
		return nil, err
	}
	if d := req.GetDurationMs(); d < 0 || d > fsm.MaxDurationMs {
		return nil, invalid("duration_ms is %d; it must be 0 (until resumed) to %d (366 days)", d, int64(fsm.MaxDurationMs))
	}
	q, err := g.b.Queues().PauseQueue(ctx, req.Name, req.FairnessKey, req.DurationMs)
	if err != nil {
		return nil, err
	}
	return &raftqv1.PauseQueueResponse{Queue: g.project(q)}, nil
}

func (s brokerService) ResumeQueue(ctx context.Context, req *raftqv1.ResumeQueueRequest) (*raftqv1.ResumeQueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkPause(req.GetName(), req.GetFairnessKey()); err != nil {
		return nil, err
	}
	q, err := g.b.Queues().ResumeQueue(ctx, req.Name, req.FairnessKey)
	if err != nil {
		return nil, err
	}
	return &raftqv1.ResumeQueueResponse{Queue: g.project(q)}, nil
}

func (s brokerService) Enqueue(ctx context.Context, req *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	n := len(req.GetMessages())
	if n == 0 {
		return nil, invalid("messages: at least one message is required")
	}
	if n > MaxBatch {
		return nil, invalid("messages: %d in one request, the limit is %d", n, MaxBatch)
	}
	ids, err := g.b.Enqueue(ctx, req.Queue, req.Messages)
	if err != nil {
		return nil, err
	}
	return &raftqv1.EnqueueResponse{MessageIds: formatIDs(ids)}, nil
}

// parseRefs turns API lease refs into command refs; a malformed id or token
// is bad input for the whole request.
func parseRefs(queue, field string, refs []*raftqv1.LeaseRef) ([]broker.LeaseRef, error) {
	if len(refs) == 0 {
		return nil, invalid("%s: at least one item is required", field)
	}
	if len(refs) > MaxBatch {
		return nil, invalid("%s: %d items, the limit is %d", field, len(refs), MaxBatch)
	}
	out := make([]broker.LeaseRef, len(refs))
	for i, r := range refs {
		ref, err := parseRef(queue, field, i, r.GetMessageId(), r.GetLeaseToken())
		if err != nil {
			return nil, err
		}
		out[i] = ref
	}
	return out, nil
}

// parseRef parses item i of a request's list field; the item's name
// ("acks[3]") is formatted only for an error, not on every call.
func parseRef(queue, field string, i int, id, token string) (broker.LeaseRef, error) {
	mid, err := parseHex("message id", id)
	if err != nil {
		return broker.LeaseRef{}, invalid("%s[%d].message_id: %v", field, i, err)
	}
	tok, err := parseHex("lease token", token)
	if err != nil {
		return broker.LeaseRef{}, invalid("%s[%d].lease_token: %v", field, i, err)
	}
	return broker.LeaseRef{Queue: queue, MessageID: mid, Token: tok}, nil
}

// itemResults maps the items' outcomes. An item's error names the item,
// its message and its queue ("acks[3]: message 00..2a of queue jobs: stale
// or unknown lease token"), as a call's own errors name their field: a
// consumer logging one refused ack of a batch can tell which it was. The
// text is made only for an error.
//
// The results share one backing array: two allocations for any number
// of items instead of one per item (a consumer acking a Lease
// response's 64 deliveries in one call).
func itemResults(queue, field string, messageID func(int) string, items []error) []*raftqv1.ItemResult {
	out := make([]*raftqv1.ItemResult, len(items))
	all := make([]raftqv1.ItemResult, len(items))
	for i, err := range items {
		r := &all[i]
		out[i] = r
		if err == nil {
			r.Ok, r.Code = true, int32(code.Code_OK)
			continue
		}
		r.Code = int32(codeOf(err))
		r.Error = fmt.Sprintf("%s[%d]: message %s of queue %s: %v", field, i, messageID(i), queue, err)
	}
	return out
}

func (s brokerService) Ack(ctx context.Context, req *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	refs, err := parseRefs(req.Queue, "acks", req.Acks)
	if err != nil {
		return nil, err
	}
	items, err := g.b.Ack(ctx, refs)
	if err != nil {
		return nil, err
	}
	return &raftqv1.AckResponse{Results: itemResults(req.Queue, "acks", func(i int) string { return req.Acks[i].GetMessageId() }, items)}, nil
}

func (s brokerService) Nack(ctx context.Context, req *raftqv1.NackRequest) (*raftqv1.NackResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	if len(req.GetNacks()) == 0 {
		return nil, invalid("nacks: at least one item is required")
	}
	if len(req.Nacks) > MaxBatch {
		return nil, invalid("nacks: %d items, the limit is %d", len(req.Nacks), MaxBatch)
	}
	items := make([]broker.NackItem, len(req.Nacks))
	for i, n := range req.Nacks {
		ref, err := parseRef(req.Queue, "nacks", i, n.GetMessageId(), n.GetLeaseToken())
		if err != nil {
			return nil, err
		}
		if n.DelayMs < 0 || n.DelayMs > fsm.MaxDurationMs {
			return nil, invalid("nacks[%d].delay_ms is %d, it must be in [0, %d] (0 to %s)", i, n.DelayMs, int64(fsm.MaxDurationMs), fsm.HumanMs(fsm.MaxDurationMs))
		}
		if len(n.Reason) > maxReasonLen {
			return nil, invalid("nacks[%d].reason is longer than %d bytes", i, maxReasonLen)
		}
		items[i] = broker.NackItem{Ref: ref, DelayMs: n.DelayMs, Reason: n.Reason, DeadLetter: n.DeadLetter, Unprocessed: n.Unprocessed}
	}
	results, err := g.b.Nack(ctx, items)
	if err != nil {
		return nil, err
	}
	return &raftqv1.NackResponse{Results: itemResults(req.Queue, "nacks", func(i int) string { return req.Nacks[i].GetMessageId() }, results)}, nil
}

func (s brokerService) ExtendLease(ctx context.Context, req *raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	if req.ExtendByMs < 0 || req.ExtendByMs > fsm.MaxDurationMs {
		return nil, invalid("extend_by_ms is %d, it must be in [0, %d] (0 to %s)", req.ExtendByMs, int64(fsm.MaxDurationMs), fsm.HumanMs(fsm.MaxDurationMs))
	}
	refs, err := parseRefs(req.Queue, "leases", req.Leases)
	if err != nil {
		return nil, err
	}
	results, deadlines, err := g.b.ExtendLease(ctx, refs, req.ExtendByMs)
	if err != nil {
		return nil, err
	}
	// The remaining time, as of this answer, on the clock the deadlines
	// are on: a client whose clock disagrees with the leader's reckons by
	// this, not by the deadline (issue 20, hole 7).
	nowMs := g.b.NowMs()
	remaining := make([]int64, len(deadlines))
	for i, dl := range deadlines {
		if i < len(results) && results[i] == nil && dl > 0 {
			remaining[i] = max(dl-nowMs, 1)
		}
	}
	return &raftqv1.ExtendLeaseResponse{Results: itemResults(req.Queue, "leases", func(i int) string { return req.Leases[i].GetMessageId() }, results), DeadlinesMs: deadlines, RemainingMs: remaining}, nil
}

func (s brokerService) Peek(ctx context.Context, req *raftqv1.PeekRequest) (*raftqv1.PeekResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	limit := int(req.Limit)
	switch {
	case limit < 0 || limit > MaxPeekLimit:
		return nil, invalid("limit must be in [0, %d]", MaxPeekLimit)
	case limit == 0:
		limit = DefaultPeek
	}
	var ds []*state.Delivery
	var err error
	if pf, filtered, ferr := peekFilter(req); ferr != nil {
		return nil, ferr
	} else if filtered {
		ds, err = g.b.Queues().PeekFiltered(req.Queue, limit, req.DeadLetter, pf)
	} else {
		ds, err = g.b.Queues().Peek(req.Queue, limit, req.DeadLetter)
	}
	if err != nil {
		return nil, err
	}
	// At least one message, and no more than a default gRPC client takes.
	return &raftqv1.PeekResponse{Messages: capBytes(projectDeliveries(ds), DefaultMaxBatchBytes)}, nil
}

// GetMessage tells one message's story: where it is, its attempts and
// its life events (a linearizable read, as Peek: readMethods).
func (s brokerService) GetMessage(ctx context.Context, req *raftqv1.GetMessageRequest) (*raftqv1.GetMessageResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	id, err := parseHex("message_id", req.GetMessageId())
	if err != nil {
		return nil, err
	}
	mi, err := g.b.Queues().GetMessage(req.Queue, id)
	if err != nil {
		return nil, err
	}
	return projectMessage(mi), nil
}

func (s brokerService) Redrive(ctx context.Context, req *raftqv1.RedriveRequest) (*raftqv1.RedriveResponse, error) {
	g := s.callGroup(ctx)
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, invalid("limit must not be negative")
	}
	if len(req.IdempotencyKey) > fsm.MaxDedupIDLen {
		return nil, invalid("idempotency_key is longer than %d bytes", fsm.MaxDedupIDLen)
	}
	r, err := redriveCommand(req)
	if err != nil {
		return nil, err
	}
	n, job, err := g.b.Queues().RedriveWith(ctx, r)
	if err != nil {
		return nil, err
	}
	resp := &raftqv1.RedriveResponse{Moved: n}
	if job != 0 {
		resp.JobId = FormatID(job)
	}
	return resp, nil
}
