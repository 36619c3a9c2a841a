package broker

import (
	"context"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/logconv"
	"github.com/raftq/raftq/fsm/state"
	"github.com/raftq/raftq/metrics"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/protobuf/proto"
)

// The broker's operations. Callers have validated the shape of their input
// (names, sizes, ranges) and routed the call here, to the leader for
// anything that writes or must see every acknowledged write. Results come
// back as the state machine decided them; errors wrap the fsm, cluster and
// scheduler sentinels, for the caller to map to its own codes.

// LeaseRef names one lease: a message and the token it was granted under.
type LeaseRef struct {
	Queue     string
	MessageID uint64
	Token     uint64
}

// NackItem is one negative acknowledgement.
type NackItem struct {
	Ref        LeaseRef
	DelayMs    int64
	Reason     string
	DeadLetter bool
	// Unprocessed hands the message back without counting the attempt.
	Unprocessed bool
}

func (r LeaseRef) log() *fsmv1.Ref {
	return &fsmv1.Ref{Queue: r.Queue, MessageId: r.MessageID, LeaseToken: r.Token}
}

func logRefs(refs []LeaseRef) []*fsmv1.Ref {
	out := make([]*fsmv1.Ref, len(refs))
	for i, r := range refs {
		out[i] = r.log()
	}
	return out
}

// Queue is a queue as the broker describes it: the replicated config and
// counters, and what the leader's scheduler knows of it.
type Queue struct {
	*state.QueueInfo
	Consumers    int
	Drain        *metrics.DrainEstimate      // nil until the queue is sampled
	FairnessKeys []*raftqv1.FairnessKeyStats // only when asked for
	ThrottleKeys []*raftqv1.ThrottleKeyStats // only when asked for
}

// CreateQueue creates a queue (and its dead-letter queue when the config
// asks for the default one).
func (b *Broker) CreateQueue(ctx context.Context, name string, cfg *raftqv1.QueueConfig) (*Queue, error) {
	res, err := apply[*fsm.QueueResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: logconv.QueueConfig(cfg)}}})
	if err != nil {
		return nil, err
	}
	return b.queue(res.Queue), nil
}

// UpdateQueue changes the fields of a queue's config named by mask (all of
// them when mask is empty).
func (b *Broker) UpdateQueue(ctx context.Context, name string, cfg *raftqv1.QueueConfig, mask []string) (*Queue, error) {
	res, err := apply[*fsm.QueueResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: name, Config: logconv.QueueConfig(cfg), Mask: mask}}})
	if err != nil {
		return nil, err
	}
	return b.queue(res.Queue), nil
}

// DeleteQueue deletes a queue and everything in it.
func (b *Broker) DeleteQueue(ctx context.Context, name string) error {
	_, err := apply[*fsm.Done](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: name}}})
	if err == nil {
		b.leases.Forget(name)
	}
	return err
}

// PurgeQueue drops every message of a queue that is not leased and returns
// how many.
func (b *Broker) PurgeQueue(ctx context.Context, name string) (int64, error) {
	res, err := apply[*fsm.CountResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: name}}})
	if err != nil {
		return 0, err
	}
	return res.Count, nil
}

// Redrive moves up to limit messages (0: all) from a queue's dead-letter
// queue back to it and returns how many moved.
func (b *Broker) Redrive(ctx context.Context, queue string, limit int64) (int64, error) {
	res, err := apply[*fsm.CountResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: queue, Limit: limit}}})
	if err != nil {
		return 0, err
	}
	return res.Count, nil
}

// Enqueue admits msgs into queue (all or none) and returns their ids once
// the entry carrying them has committed. Concurrent calls share entries.
func (b *Broker) Enqueue(ctx context.Context, queue string, msgs []*raftqv1.EnqueueMessage) ([]uint64, error) {
	lm := logconv.EnqueueMessages(msgs)
	if err := b.state.CheckEnqueue(queue, lm, b.cfg.MaxQueuedBytes); err != nil {
		return nil, err
	}
	// What the request holds in memory until it commits: payloads,
	// headers, keys and ids, as encoded.
	size := int64(0)
	for _, m := range lm {
		size += int64(proto.Size(m))
	}
	if err := b.gate.acquire(size); err != nil {
		return nil, err
	}
	out, err := b.enqueues.submit(ctx, enqueueReq{&fsmv1.EnqueueBatch{Queue: queue, Messages: lm}}, func() { b.gate.release(size) })
	if err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.EnqueueResult](out.res, nil)
	if err != nil {
		return nil, err
	}
	batch := res.Batches[out.pos]
	return batch.IDs, batch.Err
}

// Ack settles leases; the result has one error (nil for success) per ref.
// Concurrent calls share entries, and the scheduler may grant the
// consumer's next messages while the ack commits.
func (b *Broker) Ack(ctx context.Context, refs []LeaseRef) ([]error, error) {
	if err := b.state.HasQueue(refs[0].Queue); err != nil {
		return nil, err
	}
	lr := logRefs(refs)
	defer b.sched.Settling(lr)()
	out, err := b.acks.submit(ctx, ackReq(lr), nil)
	if err != nil {
		return nil, err
	}
	res, err := fsm.As[*fsm.ItemsResult](out.res, nil)
	if err != nil {
		return nil, err
	}
	items := res.Items[out.offset : out.offset+len(refs)]
	b.settled(refs, items)
	return items, nil
}

// settled observes the lease durations of the refs whose item succeeded.
func (b *Broker) settled(refs []LeaseRef, items []error) {
	keys := make([]metrics.LeaseKey, 0, len(refs))
	for i, r := range refs {
		if i < len(items) && items[i] == nil {
			keys = append(keys, metrics.LeaseKey{Queue: r.Queue, ID: r.MessageID, Token: r.Token})
		}
	}
	b.leases.Settled(keys, b.clock.Now())
}

// Delivered records deliveries a Lease stream has sent: enqueue-to-delivery
// latency now, and the start of each lease for its duration once settled.
func (b *Broker) Delivered(ds []*state.Delivery) {
	out := make([]metrics.Delivery, len(ds))
	for i, d := range ds {
		out[i] = metrics.Delivery{
			Key:        metrics.LeaseKey{Queue: d.Queue, ID: d.ID, Token: d.LeaseToken},
			EnqueuedMs: d.EnqueuedMs,
			DeadlineMs: d.LeaseDeadlineMs,
		}
	}
	b.leases.Delivered(out, b.clock.Now())
}

// Nack hands messages back (after a delay, or to the dead-letter queue);
// one error per item.
func (b *Broker) Nack(ctx context.Context, items []NackItem) ([]error, error) {
	if err := b.state.HasQueue(items[0].Ref.Queue); err != nil {
		return nil, err
	}
	cmd := &fsmv1.Nack{Items: make([]*fsmv1.NackOne, len(items))}
	for i, n := range items {
		cmd.Items[i] = &fsmv1.NackOne{Ref: n.Ref.log(), DelayMs: n.DelayMs, Reason: n.Reason, DeadLetter: n.DeadLetter, Uncounted: n.Unprocessed}
	}
	res, err := apply[*fsm.ItemsResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: cmd}})
	if err != nil {
		return nil, err
	}
	refs := make([]LeaseRef, len(items))
	for i, n := range items {
		refs[i] = n.Ref
	}
	b.settled(refs, res.Items)
	return res.Items, nil
}

// ExtendLease moves lease deadlines by extendByMs (0: the queue's
// visibility timeout); one error and one new deadline per ref.
func (b *Broker) ExtendLease(ctx context.Context, refs []LeaseRef, extendByMs int64) ([]error, []int64, error) {
	if err := b.state.HasQueue(refs[0].Queue); err != nil {
		return nil, nil, err
	}
	res, err := apply[*fsm.ExtendResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: logRefs(refs), ExtendByMs: extendByMs}}})
	if err != nil {
		return nil, nil, err
	}
	return res.Items, res.Deadlines, nil
}

// Lease registers a consumer with the leader's scheduler; its deliveries
// arrive on the returned consumer until it is closed or leadership moves
// (scheduler.ErrNotLeader).
func (b *Broker) Lease(ctx context.Context, req scheduler.ConsumerRequest) (*scheduler.Consumer, error) {
	if err := b.state.HasQueue(req.Queue); err != nil {
		return nil, err
	}
	return b.sched.Register(ctx, req)
}

// ListConsumers describes the consumers registered on queue, as the
// leader's scheduler sees them.
func (b *Broker) ListConsumers(queue string) ([]scheduler.ConsumerInfo, error) {
	if err := b.state.HasQueue(queue); err != nil {
		return nil, err
	}
	return b.sched.ListConsumers(queue)
}

// GetQueue describes a queue; withKeys adds its fairness and throttle keys
// as the scheduler sees them.
func (b *Broker) GetQueue(name string, withKeys bool) (*Queue, error) {
	qi, err := b.state.GetQueue(name)
	if err != nil {
		return nil, err
	}
	q := b.queue(qi)
	if withKeys {
		q.FairnessKeys, q.ThrottleKeys = b.sched.KeyStats(name)
	}
	return q, nil
}

// ListQueues describes every queue whose name starts with prefix.
func (b *Broker) ListQueues(prefix string) []*Queue {
	var out []*Queue
	for _, qi := range b.state.ListQueues(prefix) {
		out = append(out, b.queue(qi))
	}
	return out
}

// Peek lists up to limit ready messages in delivery order, or with
// deadLetter the queue's dead-lettered ones.
func (b *Broker) Peek(queue string, limit int, deadLetter bool) ([]*state.Delivery, error) {
	return b.state.Peek(queue, limit, deadLetter)
}

func (b *Broker) queue(qi *state.QueueInfo) *Queue {
	q := &Queue{QueueInfo: qi, Consumers: b.sched.Consumers(qi.Name)}
	if e, ok := b.drain.Estimate(qi.Name); ok {
		q.Drain = &e
	}
	return q
}

// The coalescers' request kinds and how a batch of them becomes a command.

type enqueueReq struct{ batch *fsmv1.EnqueueBatch }

type ackReq []*fsmv1.Ref

func buildEnqueue(reqs []enqueueReq) *fsmv1.Command {
	batches := make([]*fsmv1.EnqueueBatch, len(reqs))
	for i, r := range reqs {
		batches[i] = r.batch
	}
	return &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: batches}}}
}

func sizeEnqueue(r enqueueReq) (items, bytes int) {
	for _, m := range r.batch.Messages {
		bytes += len(m.Payload)
	}
	return len(r.batch.Messages), bytes
}

func buildAck(reqs []ackReq) *fsmv1.Command {
	var all []*fsmv1.Ref
	for _, r := range reqs {
		all = append(all, r...)
	}
	return &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: all}}}
}

func sizeAck(r ackReq) (items, bytes int) { return len(r), 0 }

// Checkpoint proposes a Checkpoint entry and returns its index: every
// replica records its state digest there.
func (b *Broker) Checkpoint(ctx context.Context) (uint64, error) {
	res, err := apply[*fsm.CheckpointResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}})
	if err != nil {
		return 0, err
	}
	return res.Index, nil
}

var _ fsm.Notifier = (*changeFeed)(nil)
