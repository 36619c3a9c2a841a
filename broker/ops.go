package broker

import (
	"context"
	"fmt"

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

// Enqueue admits msgs into queue (all or none) and returns their ids once
// the entry carrying them has committed. Concurrent calls share entries.
func (b *Broker) Enqueue(ctx context.Context, queue string, msgs []*raftqv1.EnqueueMessage) ([]uint64, error) {
	if err := b.versions.concurrencyKeys(msgs); err != nil {
		return nil, err
	}
	lm := logconv.EnqueueMessages(msgs)
	if err := b.reads.CheckEnqueue(queue, lm, b.cfg.MaxQueuedBytes); err != nil {
		return nil, err
	}
	req := newEnqueueReq(queue, lm)
	if err := b.gate.acquire(req.held); err != nil {
		return nil, err
	}
	out, err := b.enqueues.submit(ctx, req)
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
	if err := b.reads.HasQueue(refs[0].Queue); err != nil {
		return nil, err
	}
	lr := logRefs(refs)
	defer b.sched.Settling(lr)()
	out, err := b.acks.submit(ctx, ackReq(lr))
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
	if err := b.reads.HasQueue(items[0].Ref.Queue); err != nil {
		return nil, err
	}
	cmd := &fsmv1.Nack{Items: make([]*fsmv1.NackOne, len(items))}
	for i, n := range items {
		if n.Unprocessed && !n.DeadLetter && n.DelayMs > 0 {
			// An older entry drops the delay without a word.
			if err := b.versions.need(fsm.GuardVersion, fmt.Sprintf("nacks[%d].delay_ms with unprocessed", i)); err != nil {
				return nil, err
			}
		}
		cmd.Items[i] = &fsmv1.NackOne{Ref: n.Ref.log(), DelayMs: n.DelayMs, Reason: n.Reason, DeadLetter: n.DeadLetter, Uncounted: n.Unprocessed}
	}
	b.nackBackoff(cmd.Items)
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

// nackBackoff writes the queue's retry backoff into each nack that takes
// it (counted, not to the DLQ, without its own delay_ms): the leader
// computes it, jitter drawn here, and the entry carries it in whole
// milliseconds (scheduler/retry.go). Nacks of a queue without a policy,
// or on a cluster below fsm.RetryVersion, carry none.
func (b *Broker) nackBackoff(items []*fsmv1.NackOne) {
	var refs []*fsmv1.Ref
	var at []int
	for i, it := range items {
		if it.DelayMs == 0 && !it.Uncounted && !it.DeadLetter {
			refs = append(refs, it.Ref)
			at = append(at, i)
		}
	}
	if len(refs) == 0 {
		return
	}
	for j, d := range b.sched.RetryDelays(refs) {
		items[at[j]].RetryDelayMs = d
	}
}

// ExtendLease moves lease deadlines by extendByMs (0: the queue's
// visibility timeout); one error and one new deadline per ref.
func (b *Broker) ExtendLease(ctx context.Context, refs []LeaseRef, extendByMs int64) ([]error, []int64, error) {
	if err := b.reads.HasQueue(refs[0].Queue); err != nil {
		return nil, nil, err
	}
	res, err := apply[*fsm.ExtendResult](ctx, b, &fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: logRefs(refs), ExtendByMs: extendByMs}}})
	if err != nil {
		return nil, nil, err
	}
	return res.Items, res.Deadlines, nil
}

// NowMs is the node's clock, the one commands are stamped with and lease
// deadlines are reckoned on, in Unix milliseconds: what a lease's
// remaining time is measured against.
func (b *Broker) NowMs() int64 { return b.clock.Now().UnixMilli() }

// Lease registers a consumer with the leader's scheduler; its deliveries
// arrive on the returned consumer until it is closed or leadership moves
// (scheduler.ErrNotLeader).
func (b *Broker) Lease(ctx context.Context, req scheduler.ConsumerRequest) (*scheduler.Consumer, error) {
	if err := b.reads.HasQueue(req.Queue); err != nil {
		return nil, err
	}
	return b.sched.Register(ctx, req)
}

// The coalescers' request kinds and how a batch of them becomes a command.

// enqueueReq is one Enqueue call's batch, sized once: payload bytes for
// the coalescer's entry cap, and what it holds in memory until it commits
// (payloads, headers, keys and ids, as encoded) for the pending gate.
type enqueueReq struct {
	batch   *fsmv1.EnqueueBatch
	payload int
	held    int64
}

func newEnqueueReq(queue string, msgs []*fsmv1.EnqueueMessage) enqueueReq {
	r := enqueueReq{batch: &fsmv1.EnqueueBatch{Queue: queue, Messages: msgs}}
	for _, m := range msgs {
		r.payload += len(m.Payload)
		r.held += int64(proto.Size(m))
	}
	return r
}

type ackReq []*fsmv1.Ref

func buildEnqueue(reqs []enqueueReq) *fsmv1.Command {
	batches := make([]*fsmv1.EnqueueBatch, len(reqs))
	for i, r := range reqs {
		batches[i] = r.batch
	}
	return &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: batches}}}
}

func sizeEnqueue(r enqueueReq) (items, bytes int) { return len(r.batch.Messages), r.payload }

func buildAck(reqs []ackReq) *fsmv1.Command {
	var all []*fsmv1.Ref
	for _, r := range reqs {
		all = append(all, r...)
	}
	return &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: all}}}
}

func sizeAck(r ackReq) (items, bytes int) { return len(r), 0 }

var _ fsm.Notifier = (*changeFeed)(nil)
