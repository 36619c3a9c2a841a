package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/logconv"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
)

// Queues is the broker's queue administration and reads: the operations
// that name a queue rather than messages in it. It is a facet of Broker
// (Broker.Queues), kept apart so each type stays small.
type Queues struct {
	b   *Broker
	key string // the idempotency key CreateQueue and UpdateQueue carry (Keyed)
}

// Queues returns the queue administration facet.
func (b *Broker) Queues() Queues { return Queues{b: b} }

// Keyed returns the facet whose CreateQueue and UpdateQueue carry key
// (from fsm.WriteKeyVersion: a repeat changes nothing; before it a key is
// refused, NeedsVersionError naming the field).
func (qs Queues) Keyed(key string) Queues { qs.key = key; return qs }

// CreateQueue creates a queue (and its dead-letter queue when the config
// asks for the default one).
//
// A config naming an existing ordinary queue as its dead-letter queue
// would turn that queue into one. The state machine refuses it from log
// version 12 when the queue holds messages (fsm.GuardVersion); this
// refuses it when the leader's scheduler has consumers attached to it
// (which the state does not know), and on a cluster below version 12
// altogether, whose entries would convert a queue in use.
func (qs Queues) CreateQueue(ctx context.Context, name string, cfg *raftqv1.QueueConfig) (*Queue, error) {
	if err := qs.b.versions.concurrencyConfig(cfg, nil); err != nil {
		return nil, err
	}
	if qs.key != "" {
		if err := qs.b.versions.need(fsm.WriteKeyVersion, "CreateQueue.idempotency_key"); err != nil {
			return nil, err
		}
	}
	if err := qs.checkRetry(cfg, cfg.GetRetry() != nil); err != nil {
		return nil, err
	}
	if d := cfg.GetDeadLetterQueue(); d != "" {
		if qi, err := qs.b.reads.GetQueue(d); err == nil && !qi.IsDeadLetterQueue {
			if err := qs.b.versions.need(fsm.GuardVersion, "config.dead_letter_queue naming the ordinary queue "+d); err != nil {
				return nil, err
			}
			cs, err := qs.b.sched.ListConsumers(d)
			if err != nil {
				return nil, err
			}
			if len(cs) > 0 {
				return nil, fmt.Errorf("%w: queue %s has %d consumer(s) attached: an ordinary queue in use cannot become a dead-letter queue; name an empty queue, a dead-letter queue or a new name",
					fsm.ErrInUse, d, len(cs))
			}
		}
	}
	res, err := apply[*fsm.QueueResult](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: logconv.QueueConfig(cfg), IdempotencyKey: qs.key}}})
	if err != nil {
		return nil, err
	}
	return qs.queue(res.Queue), nil
}

// UpdateQueue changes the fields of a queue's config named by mask (all of
// them when mask is empty).
func (qs Queues) UpdateQueue(ctx context.Context, name string, cfg *raftqv1.QueueConfig, mask []string) (*Queue, error) {
	if err := qs.b.versions.concurrencyConfig(cfg, mask); err != nil {
		return nil, err
	}
	if qs.key != "" {
		if err := qs.b.versions.need(fsm.WriteKeyVersion, "UpdateQueue.idempotency_key"); err != nil {
			return nil, err
		}
	}
	sets := cfg.GetRetry() != nil && len(mask) == 0 || slices.ContainsFunc(mask, func(p string) bool { return p == "retry" || p == "config.retry" })
	if err := qs.checkRetry(cfg, sets); err != nil {
		return nil, err
	}
	res, err := apply[*fsm.QueueResult](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: name, Config: logconv.QueueConfig(cfg), Mask: mask, IdempotencyKey: qs.key}}})
	if err != nil {
		return nil, err
	}
	return qs.queue(res.Queue), nil
}

// checkRetry refuses a config that sets the retry policy (sets) before
// the cluster applies fsm.RetryVersion (an older replica would keep it as
// data it never reads, and no entry would carry its delays), and a policy
// out of range before it is proposed.
func (qs Queues) checkRetry(cfg *raftqv1.QueueConfig, sets bool) error {
	if !sets {
		return nil
	}
	if err := qs.b.versions.need(fsm.RetryVersion, "config.retry"); err != nil {
		return err
	}
	return fsm.ValidateRetry(logconv.QueueConfig(cfg).GetRetry())
}

// DeleteConditions make a delete conditional (DeleteQueueRequest).
type DeleteConditions struct {
	// IfEmpty: refuse a queue that holds messages, or whose messages wait
	// in its dead-letter queue.
	IfEmpty bool
	// IfUnused: refuse a queue that has consumers.
	IfUnused bool
}

// ErrNeedsVersion: a request uses a field whose rule the cluster does not
// apply yet (not every voter runs a build of that log version). Wrapped in
// a *NeedsVersionError saying which.
var ErrNeedsVersion = errors.New("the cluster does not apply this yet")

// NeedsVersionError names the field, the log version it needs and the
// cluster's.
type NeedsVersionError struct {
	Field          string
	Needs, Cluster uint32
}

func (e *NeedsVersionError) Error() string {
	return fmt.Sprintf("%s needs every voter at log version %d; the cluster is at log version %d (upgrade every voter to a build that applies version %d; the cluster version rises by itself)",
		e.Field, e.Needs, e.Cluster, e.Needs)
}

func (e *NeedsVersionError) Unwrap() error { return ErrNeedsVersion }

// DeleteQueue deletes a queue and everything in it, if cond holds. It runs
// on the leader (the transport forwards writes there), whose scheduler
// knows the consumers. IfEmpty is checked by the state machine as the
// delete applies once the cluster is at fsm.IfEmptyVersion, so a message
// committed just before the delete is never dropped unseen; on an older
// cluster the leader checks its own state just before proposing. A delete
// repeated with the same non-empty idempotency key (a retry) answers OK and
// deletes nothing more; a key is refused (NeedsVersionError) until the
// cluster applies fsm.DeleteKeyVersion, since an older entry ignores it
// and the retry it protects would delete again.
func (qs Queues) DeleteQueue(ctx context.Context, name string, cond DeleteConditions, idempotencyKey string) error {
	if cv := qs.b.reads.ClusterVersion(); idempotencyKey != "" && cv < fsm.DeleteKeyVersion {
		return &NeedsVersionError{Field: "DeleteQueue.idempotency_key", Needs: fsm.DeleteKeyVersion, Cluster: cv}
	}
	del := &fsmv1.DeleteQueue{Name: name, IdempotencyKey: idempotencyKey}
	if cond.IfUnused {
		cs, err := qs.b.sched.ListConsumers(name)
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			return fmt.Errorf("%w: queue %s has %d consumer(s) attached (raftq consumers %s lists them); stop them first, or delete without if_unused",
				fsm.ErrInUse, name, len(cs), name)
		}
	}
	if cond.IfEmpty {
		if qs.b.reads.ClusterVersion() >= fsm.IfEmptyVersion {
			del.IfEmpty = true
		} else if err := qs.b.reads.CheckEmpty(name); err != nil {
			return err
		}
	}
	_, err := apply[*fsm.Done](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: del}})
	if err == nil {
		qs.b.leases.Forget(name)
	}
	return err
}

// PurgeQueue drops every message of a queue that is not leased and returns
// how many. A purge repeated with the same non-empty idempotency key (a
// retry) answers the first one's count and purges nothing more, once the
// cluster applies log version 7.
func (qs Queues) PurgeQueue(ctx context.Context, name, idempotencyKey string) (int64, error) {
	res, err := apply[*fsm.CountResult](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: name, IdempotencyKey: idempotencyKey}}})
	if err != nil {
		return 0, err
	}
	return res.Count, nil
}

// Redrive moves up to limit messages (0: all) from a queue's dead-letter
// queue back to it and returns how many moved; a repeated idempotency key
// works as for PurgeQueue.
func (qs Queues) Redrive(ctx context.Context, queue string, limit int64, idempotencyKey string) (int64, error) {
	n, _, err := qs.RedriveWith(ctx, &fsmv1.Redrive{Queue: queue, Limit: limit, IdempotencyKey: idempotencyKey})
	return n, err
}

// RedriveWith proposes a Redrive as given (filters, dry_run, ids, a rate
// in messages per 1000 s) and returns the count and the job it started
// (0: none). A request using a field of fsm.RedriveVersion is refused
// (NeedsVersionError) before the cluster applies it: an older entry
// ignores the field and would move everything at once.
func (qs Queues) RedriveWith(ctx context.Context, r *fsmv1.Redrive) (int64, uint64, error) {
	if r.CancelJob != 0 {
		if err := qs.b.versions.need(fsm.RedriveCancelVersion, "RedriveRequest.cancel_job"); err != nil {
			return 0, 0, err
		}
	}
	if r.FairnessKey != "" || r.ReasonContains != "" || r.OlderThanMs != 0 || r.DryRun || r.RateMilli != 0 || len(r.MessageIds) > 0 {
		if err := qs.b.versions.need(fsm.RedriveVersion, "RedriveRequest filters, dry_run, rate_per_sec and message_ids"); err != nil {
			return 0, 0, err
		}
	}
	res, err := apply[*fsm.CountResult](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: r}})
	if err != nil {
		return 0, 0, err
	}
	return res.Count, res.Job, nil
}

// PauseQueue pauses a queue (empty key) or one fairness key of it for d
// (0: until resumed) and returns the queue as it then stands. It is
// refused (NeedsVersionError) until the cluster applies fsm.PauseVersion:
// an older replica would apply nothing and go on granting.
func (qs Queues) PauseQueue(ctx context.Context, name, key string, durationMs int64) (*Queue, error) {
	if err := qs.b.versions.need(fsm.PauseVersion, "PauseQueue"); err != nil {
		return nil, err
	}
	if _, err := apply[*fsm.Done](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: name, FairnessKey: key, DurationMs: durationMs}}}); err != nil {
		return nil, err
	}
	return qs.GetQueue(name, false)
}

// ResumeQueue ends the pause of a queue (empty key) or of one key; one
// that is not paused is OK. Refused as PauseQueue below fsm.PauseVersion.
func (qs Queues) ResumeQueue(ctx context.Context, name, key string) (*Queue, error) {
	if err := qs.b.versions.need(fsm.PauseVersion, "ResumeQueue"); err != nil {
		return nil, err
	}
	if _, err := apply[*fsm.Done](ctx, qs.b, &fsmv1.Command{Op: &fsmv1.Command_ResumeQueue{ResumeQueue: &fsmv1.ResumeQueue{Name: name, FairnessKey: key}}}); err != nil {
		return nil, err
	}
	return qs.GetQueue(name, false)
}

// ListConsumers describes the consumers registered on queue, as the
// leader's scheduler sees them.
func (qs Queues) ListConsumers(queue string) ([]scheduler.ConsumerInfo, error) {
	if err := qs.b.reads.HasQueue(queue); err != nil {
		return nil, err
	}
	return qs.b.sched.ListConsumers(queue)
}

// GetQueue describes a queue; withKeys adds its fairness and throttle keys
// as the scheduler sees them.
func (qs Queues) GetQueue(name string, withKeys bool) (*Queue, error) {
	qi, err := qs.b.reads.GetQueue(name)
	if err != nil {
		return nil, err
	}
	q := qs.queue(qi)
	if withKeys {
		q.FairnessKeys, q.ThrottleKeys = qs.b.sched.KeyStats(name)
	}
	return q, nil
}

// ListQueues describes every queue whose name starts with prefix.
func (qs Queues) ListQueues(prefix string) []*Queue {
	var out []*Queue
	for _, qi := range qs.b.reads.ListQueues(prefix) {
		out = append(out, qs.queue(qi))
	}
	return out
}

// Peek lists up to limit ready messages in delivery order, or with
// deadLetter the queue's dead-lettered ones.
func (qs Queues) Peek(queue string, limit int, deadLetter bool) ([]*state.Delivery, error) {
	return qs.b.reads.Peek(queue, limit, deadLetter)
}

// PeekFiltered lists up to limit messages matching pf in id order; the
// filters need fsm.RedriveVersion (dead-letter times are recorded from
// it on).
func (qs Queues) PeekFiltered(queue string, limit int, deadLetter bool, pf fsm.PeekFilter) ([]*state.Delivery, error) {
	if err := qs.b.versions.need(fsm.RedriveVersion, "PeekRequest filters and after_id"); err != nil {
		return nil, err
	}
	return qs.b.reads.PeekFiltered(queue, limit, deadLetter, pf)
}

// GetMessage tells one message's story (fsm.Reader.GetMessage); refused
// before the cluster records stories.
func (qs Queues) GetMessage(queue string, id uint64) (*fsm.MessageInfo, error) {
	if err := qs.b.versions.need(fsm.HistoryVersion, "GetMessage"); err != nil {
		return nil, err
	}
	return qs.b.reads.GetMessage(queue, id)
}

func (qs Queues) queue(qi *state.QueueInfo) *Queue {
	q := &Queue{QueueInfo: qi, Consumers: qs.b.sched.Consumers(qi.Name)}
	if e, ok := qs.b.drain.Estimate(qi.Name); ok {
		q.Drain = &e
	}
	return q
}
