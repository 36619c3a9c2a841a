package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// pipeline is one term's grant pipeline: it turns picks into LeaseGrant
// proposals without waiting for them (up to MaxInFlightGrants
// outstanding, MaxGrantBatch grants each), keeps picked messages pending
// until their proposal's outcome is handled, handles outcomes in launch
// order, pushes committed deliveries, rolls back the ones that cannot be
// pushed and backs off after a failed proposal. Its mutex guards the
// fields below; it is taken before registry.mu, never after.
type pipeline struct {
	s *Scheduler
	t *term

	mu       sync.Mutex
	inflight int // LeaseGrant proposals outstanding
	batch    []*fsmv1.Grant
	batchTo  []*Consumer
	pending  map[string]map[uint64]struct{} // per queue: ids in unhandled grants
	last     chan struct{}                  // closed once the latest launched batch is handled
	backoff  backoff
	// ride, while a carry pass runs (carry.go), collects its picks
	// instead of batch: they go in an ack's entry, not a LeaseGrant.
	ride *Ride
}

func newPipeline(s *Scheduler, t *term) *pipeline {
	last := make(chan struct{})
	close(last)
	return &pipeline{s: s, t: t, pending: map[string]map[uint64]struct{}{}, last: last}
}

// budget is how many grants the pipeline can take now, and, while it backs
// off after a failure, until when (then the budget is 0).
func (pl *pipeline) budget(now time.Time) (int, time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if now.Before(pl.backoff.until) {
		return 0, pl.backoff.until
	}
	return (pl.s.cfg.MaxInFlightGrants-pl.inflight)*pl.s.cfg.MaxGrantBatch - len(pl.batch), time.Time{}
}

// pickAndGrant runs pickQueue over one queue, with the queue's pending
// marks, and adds a grant per pick to the batch, proposing each batch that
// fills up. It returns the number picked.
func (pl *pipeline) pickAndGrant(qv QueueView, queue string, cs *creditScratch, ps *passState, budget int, qp *queuePolicy, sc *pickScratch) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pend := pl.pending[queue]
	qp.walks++
	res := pickQueue(qv, pickInput{NowNs: ps.nowNs, Budget: budget, Seqs: cs.seqs, Credit: cs.credit, Pending: pend}, &qp.cur, &qp.bk, sc)
	var wake time.Time
	if res.Wake {
		wake = nsToTime(ps.anchor, res.WakeNs)
		ps.wakeAt(wake)
	}
	if len(res.Picks) == 0 {
		// Credit and budget to fill, and nothing deliverable: the same
		// until the queue changes or the wake time (deliver.go).
		qp.stalled, qp.wake = true, wake
		return 0
	}
	// Count the grants against their consumers before any can complete.
	picks := pl.t.reg.assign(cs.cons, res.Picks)
	if len(picks) == 0 {
		return 0
	}
	if pend == nil {
		pend = map[uint64]struct{}{}
		pl.pending[queue] = pend
	}
	visMs := qv.Config().GetVisibilityTimeoutMs()
	for _, pk := range picks {
		c := cs.cons[pk.Consumer]
		pend[pk.ID] = struct{}{}
		if r := pl.ride; r != nil {
			// A carry pass: its budget is one batch, never flushed here.
			r.grants = append(r.grants, grantFor(queue, pk.ID, c, visMs, ps.nowMs))
			r.to = append(r.to, c)
			continue
		}
		pl.batch = append(pl.batch, grantFor(queue, pk.ID, c, visMs, ps.nowMs))
		pl.batchTo = append(pl.batchTo, c)
		if len(pl.batch) >= pl.s.cfg.MaxGrantBatch {
			pl.flushLocked()
		}
	}
	return len(picks)
}

// flush proposes the batch being built, without waiting for it.
func (pl *pipeline) flush() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.flushLocked()
}

func (pl *pipeline) flushLocked() {
	if len(pl.batch) == 0 {
		return
	}
	grants, to := pl.batch, pl.batchTo
	pl.batch, pl.batchTo = nil, nil
	pl.inflight++
	prev, mine := pl.last, make(chan struct{})
	pl.last = mine
	pl.t.goTerm(func(ctx context.Context) { pl.run(ctx, grants, to, prev, mine) })
}

// run proposes one LeaseGrant and, once it is applied, pushes the
// deliveries to their consumers. Outcomes are handled in launch order
// (prev/mine) so a consumer sees messages in the order they were picked.
// A delivery that cannot be pushed (consumer gone) is rolled back.
func (pl *pipeline) run(ctx context.Context, grants []*fsmv1.Grant, to []*Consumer, prev <-chan struct{}, mine chan struct{}) {
	out, err := pl.s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: grants}}})
	// A proposal that returns no result may still commit (Raft answers
	// ErrLeadershipLost at a step-down or transfer, and a proposal stops
	// waiting when its term ends); a whole-command failure applied nothing.
	unknown := err != nil
	res, err := fsm.As[*fsm.GrantResult](out, err)
	pl.handle(ctx, grants, to, prev, mine, res, err, unknown, true)
}

// handle is what follows a batch's proposal, whether it was a LeaseGrant
// of its own (standalone: it held a place among MaxInFlightGrants) or
// rode in an ack's entry: in launch order, it un-pends the batch, pushes
// what was granted, and rolls back (or hands back) what cannot be pushed.
// unknown says that err left the entry's outcome unknown: it may have
// committed, granting leases nobody will be sent, which are handed back
// by the tokens the grants carry (returnUnknown).
func (pl *pipeline) handle(ctx context.Context, grants []*fsmv1.Grant, to []*Consumer, prev <-chan struct{}, mine chan struct{}, res *fsm.GrantResult, err error, unknown, standalone bool) {
	s := pl.s
	<-prev
	pl.mu.Lock()
	if standalone {
		pl.inflight--
	}
	if err != nil {
		pl.backoff.fail(s.clock.Now())
	} else {
		pl.backoff.ok()
	}
	for _, g := range grants {
		delete(pl.pending[g.Queue], g.MessageId)
	}
	if err != nil {
		// Nothing applied: the messages are pickable again, with no
		// change to the state that would say so.
		queues := make([]string, 0, 1)
		for _, g := range grants {
			if !slices.Contains(queues, g.Queue) {
				queues = append(queues, g.Queue)
			}
		}
		pl.t.changed(queues)
	}
	var unpushed []int
	if err == nil {
		unpushed = pl.t.reg.settled(to, res.Deliveries, nil)
	} else {
		unpushed = pl.t.reg.settled(to, nil, nil)
	}
	pl.mu.Unlock()
	close(mine)
	if err != nil {
		s.logProposeErr("lease grant", err, "grants", len(grants))
		if unknown {
			s.returnUnknown(ctx, grants)
		}
		return
	}
	if len(unpushed) == 0 {
		return
	}
	rollback := make([]*fsmv1.Ref, 0, len(unpushed))
	for _, i := range unpushed {
		d := res.Deliveries[i]
		rollback = append(rollback, &fsmv1.Ref{Queue: grants[i].Queue, MessageId: grants[i].MessageId, LeaseToken: d.LeaseToken})
	}
	s.rollBack(ctx, rollback)
}

// rollBack undoes leases whose deliveries were never sent: a LeaseRollback
// while the term runs, else (or if that fails because the term ended
// meanwhile) Config.HandBack to whoever leads now.
func (s *Scheduler) rollBack(ctx context.Context, refs []*fsmv1.Ref) {
	if ctx.Err() != nil {
		s.handBack(refs)
		return
	}
	if _, err := fsm.As[*fsm.ItemsResult](s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: refs}}})); err != nil {
		// The leases stay until they expire (delayed, never lost), unless
		// the term ended meanwhile and they can be handed back.
		s.logProposeErr("lease rollback", err, "refs", len(refs))
		if ctx.Err() != nil {
			s.handBack(refs)
		}
	}
}

// returnUnknown undoes the grants of an entry whose outcome is unknown.
// Raft answers ErrLeadershipLost for an entry in flight at a step-down or
// transfer, and the next term usually commits it: its messages would sit
// leased to a consumer that never got them until the visibility timeout,
// counted (with max_deliveries = 1, dead-lettered unseen). The grants carry
// the tokens the proposer drew (from log version 5), so each lease can be
// named: an unprocessed nack or a rollback by token is safe whether or not
// the entry committed (a lease that was never granted, or was re-granted
// since, has another token and is left alone). Whoever leads next applies
// it after the entry if the entry commits at all, since a new leader
// commits the old term's entries before its own. The error that brought us
// here usually means this node no longer leads, so they go to
// Config.HandBack, which reaches the leader once one exists (this node, if
// it still leads); without one, a term that still runs rolls them back.
func (s *Scheduler) returnUnknown(ctx context.Context, grants []*fsmv1.Grant) {
	var refs []*fsmv1.Ref
	for _, g := range grants {
		if g.GetLeaseToken() != 0 { // below log version 5 the token is the entry's index: unknown
			refs = append(refs, &fsmv1.Ref{Queue: g.Queue, MessageId: g.MessageId, LeaseToken: g.LeaseToken})
		}
	}
	if len(refs) == 0 {
		return
	}
	if s.cfg.HandBack != nil || ctx.Err() != nil {
		s.handBack(refs)
		return
	}
	s.rollBack(ctx, refs)
}

// drop forgets the pending marks of a deleted queue.
func (pl *pipeline) drop(queue string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	delete(pl.pending, queue)
}

// dropAll forgets the batch and every pending mark (the term is over and
// its proposals have returned).
func (pl *pipeline) dropAll() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.batch, pl.batchTo = nil, nil
	clear(pl.pending)
}
