package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// sweeper is one term's time-driven work: a Tick when a delayed message or
// a TTL is due, or while time-driven work is left over (from log version
// 13 an entry does at most a budget of it: fsm/state/sweep.go), a
// LeaseExpire when leases are past their deadline (not
// before the term's grace period ends, for the leases it covers: see
// term.inGrace), and a LeaseRollback of the deliveries whose leases
// lapsed before their stream could send them (registry.lapseBuffered,
// Consumer.Take): those were never sent, so they return uncounted instead
// of expiring. Each runs off the loop, one at a time; ticks and expiries
// have their own back-off. Its mutex guards the fields below.
type sweeper struct {
	s *Scheduler
	t *term

	mu                         sync.Mutex
	tickBusy, expireBusy       bool
	rollbackBusy, stepBusy     bool
	lastTickMs                 int64
	tickBackoff, expireBackoff backoff
	stepBackoff                backoff
}

// due launches the proposals that are due, or notes in ps when they will
// be (the state's read lock held).
func (w *sweeper) due(v fsm.View, ps *passState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.tickBusy && v.SweepPending() {
		// Due already and not done: the last entries stopped at their
		// budget. Tick again (each one does a budget more), whatever
		// lastTickMs says, until nothing due is left.
		if ps.now.Before(w.tickBackoff.until) {
			ps.wakeAt(w.tickBackoff.until)
		} else {
			w.launchTick()
		}
	} else if !w.tickBusy {
		if due, ok := v.NextDue(); ok {
			switch {
			case due > ps.nowMs:
				ps.wakeAt(time.UnixMilli(due))
			case due <= w.lastTickMs:
				// A tick at or after due already applied: nothing to gain
				// from proposing another (and no spinning).
			case ps.now.Before(w.tickBackoff.until):
				ps.wakeAt(w.tickBackoff.until)
			default:
				w.launchTick()
			}
		}
	}
	if !w.expireBusy {
		if dl, ok := v.NextLeaseDeadline(); ok {
			at := time.UnixMilli(dl)
			if w.t.inGrace(dl) {
				at = w.t.graceEnd
			}
			if at.Before(w.expireBackoff.until) {
				at = w.expireBackoff.until
			}
			// While the grace lasts, only leases it does not cover expire.
			cutoff := ps.nowMs
			if ps.now.Before(w.t.graceEnd) {
				cutoff = min(cutoff, w.t.graceFromMs)
			}
			if ps.now.Before(at) {
				ps.wakeAt(at)
			} else if refs := v.ExpiredLeases(cutoff, maxExpireBatch); len(refs) > 0 {
				if refs = w.t.reg.lapseBuffered(v, refs); len(refs) > 0 {
					// The queues' retry policies, read under the same
					// lock: each expired attempt's backoff goes into
					// the entry (retry.go).
					w.launchExpire(refs, w.s.retryDelays(v, refs))
				}
			}
		}
	}
	if !w.rollbackBusy {
		if refs, parts := w.t.reg.takeLapsed(); len(refs) > 0 {
			w.launchRollback(refs, parts)
		}
	}
	if !w.stepBusy {
		w.redrives(v, ps)
	}
}

// redrives proposes a RedriveStep for the rate-limited redrive jobs that
// may move messages now (log version 14: fsm/state/redrive.go), or notes
// when the next one may (w.mu held). The state decides how many a step
// moves, by its own clock and the job's rate; the leader only chooses
// when to ask, about every tenth of a second per job (View.RedriveDue).
// A new leader finds the jobs in the state and carries on.
func (w *sweeper) redrives(v fsm.View, ps *passState) {
	var refs []*fsmv1.RedriveJobRef
	for _, d := range v.RedriveDue() {
		if d.AtMs > ps.nowMs {
			ps.wakeAt(time.UnixMilli(d.AtMs))
		} else if len(refs) < fsm.MaxStepJobs {
			refs = append(refs, &fsmv1.RedriveJobRef{Queue: d.Queue, Id: d.ID})
		}
	}
	switch {
	case len(refs) == 0:
	case ps.now.Before(w.stepBackoff.until):
		ps.wakeAt(w.stepBackoff.until)
	default:
		w.launchStep(refs)
	}
}

// launchStep proposes one RedriveStep (w.mu held); goTerm kicks the loop
// when it returns, so a job that is still due steps again.
func (w *sweeper) launchStep(refs []*fsmv1.RedriveJobRef) {
	w.stepBusy = true
	w.t.goTerm(func(ctx context.Context) {
		res, err := fsm.As[*fsm.CountResult](w.s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_RedriveStep{RedriveStep: &fsmv1.RedriveStep{Jobs: refs}}}))
		w.mu.Lock()
		w.stepBusy = false
		if err != nil {
			w.stepBackoff.fail(w.s.clock.Now())
		} else {
			w.stepBackoff.ok()
		}
		w.mu.Unlock()
		if err != nil {
			w.s.logProposeErr("redrive step", err, "jobs", len(refs))
		} else {
			w.s.log.Debug("redrive step", "jobs", len(refs), "moved", res.Count)
		}
	})
}

// launchRollback proposes a LeaseRollback of deliveries whose leases
// lapsed before their stream sent them (w.mu held). If it fails while the
// term runs they stay leased and expire, counted: a proposal failing
// there is a cluster in trouble, and trying again could spin.
func (w *sweeper) launchRollback(refs []*fsmv1.Ref, parts []lapsedPart) {
	w.rollbackBusy = true
	w.t.goTerm(func(ctx context.Context) {
		w.s.rollBack(ctx, refs)
		w.t.reg.rolledBack(refs, parts)
		w.mu.Lock()
		w.rollbackBusy = false
		w.mu.Unlock()
		w.s.log.Debug("lapsed deliveries never sent rolled back", "refs", len(refs))
	})
}

// launchTick proposes a Tick so delayed messages and TTLs take effect (w.mu held).
func (w *sweeper) launchTick() {
	w.tickBusy = true
	w.t.goTerm(func(ctx context.Context) {
		cmd := &fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}}
		_, err := w.s.propose(ctx, cmd)
		w.mu.Lock()
		w.tickBusy = false
		if err != nil {
			w.tickBackoff.fail(w.s.clock.Now())
		} else {
			w.tickBackoff.ok()
			w.lastTickMs = max(w.lastTickMs, cmd.NowMs)
		}
		w.mu.Unlock()
		if err != nil {
			w.s.logProposeErr("tick", err)
		}
		// goTerm kicks the loop when this returns: a tick that only
		// lapsed dedup entries touches no queue, and the next pass must
		// still see what is left.
	})
}

// launchExpire proposes a LeaseExpire for leases past their deadline,
// with the backoff of each (nil: none), w.mu held.
func (w *sweeper) launchExpire(refs []*fsmv1.Ref, delays []int64) {
	w.expireBusy = true
	w.t.goTerm(func(ctx context.Context) {
		_, err := fsm.As[*fsm.ItemsResult](w.s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: refs, RetryDelaysMs: delays}}}))
		w.mu.Lock()
		w.expireBusy = false
		if err != nil {
			w.expireBackoff.fail(w.s.clock.Now())
		} else {
			w.expireBackoff.ok()
		}
		w.mu.Unlock()
		if err != nil {
			w.s.logProposeErr("lease expire", err, "refs", len(refs))
		} else {
			w.s.log.Debug("leases expired", "refs", len(refs))
		}
	})
}
