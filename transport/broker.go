package transport

import (
	"context"
	"fmt"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/logconv"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
)

// Request limits that are not per-queue settings.
const (
	MaxBatch     = 1000 // messages per Enqueue, items per Ack/Nack/Extend
	MaxPeekLimit = 1000
	DefaultPeek  = 10
	MaxInFlight  = 10_000
	maxReasonLen = 1024
)

func checkQueueName(field, name string) error {
	if err := fsm.ValidateQueueName(name); err != nil {
		return invalid("%s: %v", field, err)
	}
	return nil
}

func (s *Server) CreateQueue(ctx context.Context, req *raftqv1.CreateQueueRequest) (*raftqv1.CreateQueueResponse, error) {
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.QueueResult](s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: req.Name, Config: logconv.QueueConfig(req.Config)}}}))
	if err != nil {
		return nil, err
	}
	return &raftqv1.CreateQueueResponse{Queue: projectQueue(res.Queue)}, nil
}

func (s *Server) UpdateQueue(ctx context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.UpdateQueueResponse, error) {
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	mask := req.GetUpdateMask().GetPaths()
	if err := fsm.ValidateMask(mask); err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.QueueResult](s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: req.Name, Config: logconv.QueueConfig(req.Config), Mask: mask}}}))
	if err != nil {
		return nil, err
	}
	return &raftqv1.UpdateQueueResponse{Queue: projectQueue(res.Queue)}, nil
}

func (s *Server) DeleteQueue(ctx context.Context, req *raftqv1.DeleteQueueRequest) (*raftqv1.DeleteQueueResponse, error) {
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	if _, err := s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: req.Name}}}); err != nil {
		return nil, err
	}
	return &raftqv1.DeleteQueueResponse{}, nil
}

func (s *Server) withConsumers(qi *raftqv1.QueueInfo) *raftqv1.QueueInfo {
	if s.sched != nil {
		qi.Stats.Consumers = int64(s.sched.Consumers(qi.Name))
	}
	return qi
}

func (s *Server) GetQueue(ctx context.Context, req *raftqv1.GetQueueRequest) (*raftqv1.GetQueueResponse, error) {
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	st, err := s.state.GetQueue(req.Name)
	if err != nil {
		return nil, err
	}
	qi := projectQueue(st)
	if req.IncludeKeys && s.sched != nil {
		qi.FairnessKeys, qi.ThrottleKeys = s.sched.KeyStats(req.Name)
	}
	return &raftqv1.GetQueueResponse{Queue: s.withConsumers(qi)}, nil
}

func (s *Server) ListQueues(ctx context.Context, req *raftqv1.ListQueuesRequest) (*raftqv1.ListQueuesResponse, error) {
	if len(req.GetPrefix()) > fsm.MaxQueueNameLen {
		return nil, invalid("prefix is longer than %d characters", fsm.MaxQueueNameLen)
	}
	var qs []*raftqv1.QueueInfo
	for _, st := range s.state.ListQueues(req.GetPrefix()) {
		qs = append(qs, s.withConsumers(projectQueue(st)))
	}
	return &raftqv1.ListQueuesResponse{Queues: qs}, nil
}

func (s *Server) PurgeQueue(ctx context.Context, req *raftqv1.PurgeQueueRequest) (*raftqv1.PurgeQueueResponse, error) {
	if err := checkQueueName("name", req.GetName()); err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.CountResult](s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: req.Name}}}))
	if err != nil {
		return nil, err
	}
	return &raftqv1.PurgeQueueResponse{Purged: res.Count}, nil
}

func (s *Server) Enqueue(ctx context.Context, req *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
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
	msgs := logconv.EnqueueMessages(req.Messages)
	if err := s.state.CheckEnqueue(req.Queue, msgs, s.cfg.MaxQueuedBytes); err != nil {
		return nil, err
	}
	out, err := s.enqueues.submit(ctx, &fsmv1.EnqueueBatch{Queue: req.Queue, Messages: msgs})
	if err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.EnqueueResult](out.res, nil)
	if err != nil {
		return nil, err
	}
	b := res.Batches[out.pos]
	if b.Err != nil {
		return nil, b.Err
	}
	return &raftqv1.EnqueueResponse{MessageIds: formatIDs(b.IDs)}, nil
}

// parseRefs turns API lease refs into command refs; a malformed id or token
// is bad input for the whole request.
func parseRefs(queue, field string, refs []*raftqv1.LeaseRef) ([]*fsmv1.Ref, error) {
	if len(refs) == 0 {
		return nil, invalid("%s: at least one item is required", field)
	}
	if len(refs) > MaxBatch {
		return nil, invalid("%s: %d items, the limit is %d", field, len(refs), MaxBatch)
	}
	out := make([]*fsmv1.Ref, len(refs))
	for i, r := range refs {
		ref, err := parseRef(queue, fmt.Sprintf("%s[%d]", field, i), r.GetMessageId(), r.GetLeaseToken())
		if err != nil {
			return nil, err
		}
		out[i] = ref
	}
	return out, nil
}

func parseRef(queue, field, id, token string) (*fsmv1.Ref, error) {
	mid, err := ParseID(id)
	if err != nil {
		return nil, invalid("%s.message_id: %v", field, err)
	}
	tok, err := ParseID(token)
	if err != nil {
		return nil, invalid("%s.lease_token: %v", field, err)
	}
	return &fsmv1.Ref{Queue: queue, MessageId: mid, LeaseToken: tok}, nil
}

func itemResults(items []error) []*raftqv1.ItemResult {
	out := make([]*raftqv1.ItemResult, len(items))
	for i, err := range items {
		if err == nil {
			out[i] = &raftqv1.ItemResult{Ok: true, Code: int32(code.Code_OK)}
			continue
		}
		out[i] = &raftqv1.ItemResult{Code: int32(codeOf(err)), Error: err.Error()}
	}
	return out
}

// requireQueue answers NotFound for an unknown queue before proposing.
func (s *Server) requireQueue(name string) error {
	return s.state.HasQueue(name)
}

func (s *Server) Ack(ctx context.Context, req *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	refs, err := parseRefs(req.Queue, "acks", req.Acks)
	if err != nil {
		return nil, err
	}
	if err := s.requireQueue(req.Queue); err != nil {
		return nil, err
	}
	if s.sched != nil {
		// The consumer is done with these: its next deliveries can be
		// granted while the ack commits, not after.
		defer s.sched.Settling(refs)()
	}
	out, err := s.acks.submit(ctx, refs)
	if err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.ItemsResult](out.res, nil)
	if err != nil {
		return nil, err
	}
	return &raftqv1.AckResponse{Results: itemResults(res.Items[out.offset : out.offset+len(refs)])}, nil
}

func (s *Server) Nack(ctx context.Context, req *raftqv1.NackRequest) (*raftqv1.NackResponse, error) {
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	if len(req.GetNacks()) == 0 {
		return nil, invalid("nacks: at least one item is required")
	}
	if len(req.Nacks) > MaxBatch {
		return nil, invalid("nacks: %d items, the limit is %d", len(req.Nacks), MaxBatch)
	}
	items := make([]*fsmv1.NackOne, len(req.Nacks))
	for i, n := range req.Nacks {
		field := fmt.Sprintf("nacks[%d]", i)
		ref, err := parseRef(req.Queue, field, n.GetMessageId(), n.GetLeaseToken())
		if err != nil {
			return nil, err
		}
		if n.DelayMs < 0 || n.DelayMs > fsm.MaxDurationMs {
			return nil, invalid("%s.delay_ms must be in [0, %d]", field, int64(fsm.MaxDurationMs))
		}
		if len(n.Reason) > maxReasonLen {
			return nil, invalid("%s.reason is longer than %d bytes", field, maxReasonLen)
		}
		items[i] = &fsmv1.NackOne{Ref: ref, DelayMs: n.DelayMs, Reason: n.Reason, DeadLetter: n.DeadLetter, Uncounted: n.Unprocessed}
	}
	if err := s.requireQueue(req.Queue); err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.ItemsResult](s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: items}}}))
	if err != nil {
		return nil, err
	}
	return &raftqv1.NackResponse{Results: itemResults(res.Items)}, nil
}

func (s *Server) ExtendLease(ctx context.Context, req *raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error) {
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	if req.ExtendByMs < 0 || req.ExtendByMs > fsm.MaxDurationMs {
		return nil, invalid("extend_by_ms must be in [0, %d]", int64(fsm.MaxDurationMs))
	}
	refs, err := parseRefs(req.Queue, "leases", req.Leases)
	if err != nil {
		return nil, err
	}
	if err := s.requireQueue(req.Queue); err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.ExtendResult](s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: refs, ExtendByMs: req.ExtendByMs}}}))
	if err != nil {
		return nil, err
	}
	return &raftqv1.ExtendLeaseResponse{Results: itemResults(res.Items), DeadlinesMs: res.Deadlines}, nil
}

func (s *Server) Peek(ctx context.Context, req *raftqv1.PeekRequest) (*raftqv1.PeekResponse, error) {
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
	ds, err := s.state.Peek(req.Queue, limit, req.DeadLetter)
	if err != nil {
		return nil, err
	}
	return &raftqv1.PeekResponse{Messages: projectDeliveries(ds)}, nil
}

func (s *Server) Redrive(ctx context.Context, req *raftqv1.RedriveRequest) (*raftqv1.RedriveResponse, error) {
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, invalid("limit must not be negative")
	}
	res, err := fsm.As[*fsm.CountResult](s.apply(ctx, &fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: req.Queue, Limit: req.Limit}}}))
	if err != nil {
		return nil, err
	}
	return &raftqv1.RedriveResponse{Moved: res.Count}, nil
}
