package scheduler

import (
	"context"
	"errors"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// propose stamps the command with the clock and proposes it.
func (s *Scheduler) propose(ctx context.Context, cmd *fsmv1.Command) (*fsm.Result, error) {
	cmd.NowMs = s.clock.Now().UnixMilli()
	res, err := s.p.Propose(ctx, cmd)
	if err == nil && res == nil {
		res = &fsm.Result{}
	}
	return res, err
}

// goTerm runs f on a background goroutine of the current term (s.mu held).
// The kick precedes the bookkeeping so tests never see a quiet scheduler
// with an unprocessed completion.
func (s *Scheduler) goTerm(f func(ctx context.Context)) {
	ctx := s.ctx
	s.active++
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(ctx)
		s.kick()
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
}

// flush proposes the batch being built, without waiting for it (s.mu held).
func (s *Scheduler) flush() {
	if len(s.batch) == 0 {
		return
	}
	grants, to := s.batch, s.batchTo
	s.batch, s.batchTo = nil, nil
	s.inflight++
	prev, mine := s.lastBatch, make(chan struct{})
	s.lastBatch = mine
	s.goTerm(func(ctx context.Context) { s.runGrant(ctx, grants, to, prev, mine) })
}

// runGrant proposes one LeaseGrant and, once it is applied, pushes the
// deliveries to their consumers. Completions are handled in launch order
// (prev/mine) so a consumer sees messages in the order they were picked.
// A delivery that cannot be pushed (consumer gone) is rolled back.
func (s *Scheduler) runGrant(ctx context.Context, grants []*fsmv1.Grant, to []grantTarget, prev <-chan struct{}, mine chan struct{}) {
	res, err := s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: grants}}})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	<-prev
	var rollback []*fsmv1.Ref
	s.mu.Lock()
	s.inflight--
	if err != nil {
		s.grantBackoff.fail(s.clock.Now())
	} else {
		s.grantBackoff.ok()
	}
	pushed := 0
	for i, g := range grants {
		t := to[i]
		delete(t.qs.pending, g.MessageId)
		t.c.pending--
		if err != nil || i >= len(res.Deliveries) || res.Deliveries[i] == nil {
			continue
		}
		d := res.Deliveries[i]
		if t.c.push(d) {
			t.c.delivered++
			pushed++
			continue
		}
		tok, perr := fsm.ParseID(d.GetLeaseToken())
		if perr != nil {
			s.log.Error("grant returned a bad lease token", "queue", g.Queue, "message", d.GetId(), "err", perr)
			continue
		}
		rollback = append(rollback, &fsmv1.Ref{Queue: g.Queue, MessageId: g.MessageId, LeaseToken: tok})
	}
	s.mu.Unlock()
	close(mine)
	if err != nil {
		s.logProposeErr("lease grant", err, "grants", len(grants))
	}
	if len(rollback) == 0 || ctx.Err() != nil {
		return
	}
	res, err = s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: rollback}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		// The leases stay until they expire: delayed, never lost.
		s.logProposeErr("lease rollback", err, "refs", len(rollback))
	}
}

func (s *Scheduler) logProposeErr(what string, err error, args ...any) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s.log.Debug(what+" not applied", append(args, "err", err)...)
		return
	}
	s.log.Warn(what+" failed", append(args, "err", err)...)
}

// launchTick proposes a Tick so delayed messages and TTLs take effect (s.mu held).
func (s *Scheduler) launchTick(nowMs int64) {
	s.tickBusy = true
	s.goTerm(func(ctx context.Context) {
		cmd := &fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}}
		_, err := s.propose(ctx, cmd)
		s.mu.Lock()
		s.tickBusy = false
		if err != nil {
			s.tickBackoff.fail(s.clock.Now())
		} else {
			s.tickBackoff.ok()
			s.lastTickMs = max(s.lastTickMs, cmd.NowMs)
		}
		s.mu.Unlock()
		if err != nil {
			s.logProposeErr("tick", err)
		}
	})
}

// launchExpire proposes a LeaseExpire for leases past their deadline (s.mu held).
func (s *Scheduler) launchExpire(refs []*fsmv1.Ref) {
	s.expireBusy = true
	s.goTerm(func(ctx context.Context) {
		res, err := s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: refs}}})
		if err == nil {
			err = res.Err
		}
		s.mu.Lock()
		s.expireBusy = false
		if err != nil {
			s.expireBackoff.fail(s.clock.Now())
		} else {
			s.expireBackoff.ok()
		}
		s.mu.Unlock()
		if err != nil {
			s.logProposeErr("lease expire", err, "refs", len(refs))
		} else {
			s.log.Debug("leases expired", "refs", len(refs))
		}
	})
}
