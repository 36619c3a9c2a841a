package scheduler

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// CarryAck lets an Ack entry carry grants. With Config.CarryGrants, when
// the cluster version allows (fsm.AckGrantVersion), it runs a pass with
// the credit of every ack settling (Settling) counted as free and puts
// its picks in cmd's Ack: the ack's entry grants the consumer's next
// messages, so a busy consumer costs one entry per delivery instead of a
// LeaseGrant entry and an Ack entry. The caller (the data group's ack
// coalescer) proposes cmd itself, through the group's proposer like any
// command, and hands the outcome to the ride's Settle exactly once, which
// answers the ack's own result (*fsm.ItemsResult), whatever the entry
// carried; the grants' outcome is handled as any grant batch's (pushed in
// pick order, rolled back if it cannot be pushed). It returns nil when
// cmd carries nothing (not an ack, already carrying, carrying off, no
// term, nothing picked); a nil ride's Settle passes the outcome through.
func (s *Scheduler) CarryAck(cmd *fsmv1.Command) *Ride {
	ack := cmd.GetAck()
	if ack == nil || len(ack.Grants) > 0 || !s.carrying() {
		return nil
	}
	r := s.carry()
	if r == nil {
		return nil
	}
	ack.Grants = r.grants
	return r
}

// Settle hands the outcome of the ack entry that carries r's grants to
// r's handler and returns the ack's own part of it. Call it once, after
// the entry's proposal returned; on a nil ride it returns res, err.
func (r *Ride) Settle(res fsm.Result, err error) (fsm.Result, error) {
	if r == nil {
		return res, err
	}
	ackRes, granted, gerr := grantsOf(res, err)
	r.done(granted, gerr, err != nil)
	return ackRes, err
}

// carrying reports whether acks carry grants: Config.CarryGrants asks for
// it and the cluster version allows it. While they do, the
// loop's own passes do not count settling acks as free credit (the ack's
// entry grants it); otherwise they do (Settling).
func (s *Scheduler) carrying() bool {
	return s.cfg.CarryGrants && s.state.ClusterVersion() >= fsm.AckGrantVersion
}

// Ride is the grants of one carry pass, proposed in an ack's entry, and
// that entry's outcome. done is called exactly once, by Settle; the
// handler goroutine launched with it waits for it or for the term's end.
type Ride struct {
	s      *Scheduler
	grants []*fsmv1.Grant
	to     []*Consumer

	mu        sync.Mutex
	ready     chan struct{} // closed by done
	res       *fsm.GrantResult
	err       error
	unknown   bool // err left the entry's outcome unknown (returnUnknown)
	got       bool // done was called
	abandoned bool // the term ended first: nothing will push done's deliveries
}

// done hands the ack entry's outcome for the ride's grants to its
// handler; unknown says the entry may have committed although err says
// otherwise. If the term ended before it came, no consumer will take them:
// whatever was (or may have been) granted was never sent, and goes to
// Config.HandBack.
func (r *Ride) done(res *fsm.GrantResult, err error, unknown bool) {
	r.mu.Lock()
	if r.abandoned {
		r.mu.Unlock()
		if unknown {
			r.s.returnUnknown(context.Background(), r.grants)
			return
		}
		if err == nil && res != nil {
			var refs []*fsmv1.Ref
			for i, d := range res.Deliveries {
				if d != nil {
					refs = append(refs, &fsmv1.Ref{Queue: r.grants[i].Queue, MessageId: r.grants[i].MessageId, LeaseToken: d.LeaseToken})
				}
			}
			r.s.handBack(refs)
		}
		return
	}
	r.res, r.err, r.unknown, r.got = res, err, unknown, true
	r.mu.Unlock()
	close(r.ready)
}

// wait is the ride's outcome, or, if the term ends first, the term's
// error (the outcome is then unknown to this term: what the entry
// grants is handed back when it comes, by done).
func (r *Ride) wait(ctx context.Context) (res *fsm.GrantResult, err error, unknown bool) {
	select {
	case <-r.ready:
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.got {
		r.abandoned = true
		return nil, ctx.Err(), false
	}
	return r.res, r.err, r.unknown
}

// carry runs a pass whose picks ride in an ack's entry: the same
// selection as the loop's passes (the same cursors, buckets, pending
// marks and credit, with settling acks counted as free), at most one
// grant batch, not counted among the MaxInFlightGrants standalone
// proposals (the ack coalescer bounds its own entries). It returns nil
// when nothing was picked or no term runs.
func (s *Scheduler) carry() *Ride {
	t := s.current()
	if t == nil {
		return nil
	}
	now := s.clock.Now()
	ps := passState{dirty: t.peekDirty(), now: now, nowMs: now.UnixMilli(), nowNs: float64(now.Sub(t.anchor)), anchor: t.anchor, settlingFree: true}
	p := t.policy
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.over {
		return nil // RunLeader is ending the term and waits for its goroutines
	}
	budget := s.cfg.MaxGrantBatch
	if _, until := t.pipe.budget(now); !until.IsZero() {
		return nil // proposals are failing: back off, as the loop does
	}
	r := &Ride{s: s, ready: make(chan struct{})}
	s.state.Read(func(v fsm.View) {
		t.pipe.startRide(r)
		defer t.pipe.endRide()
		t.deliver(v, &ps, budget)
	})
	if !ps.wake.IsZero() {
		// The loop may be asleep until later than a throttle or stall
		// this pass found: let it look again.
		s.kick()
	}
	if len(r.grants) == 0 {
		return nil
	}
	t.pipe.launchRide(r)
	return r
}

// peekDirty is a copy of the queues changed since the loop's last pass,
// which the loop still takes: a carry pass reads a stalled queue again
// once it changed, as the loop's next pass will.
func (t *term) peekDirty() map[string]struct{} {
	t.dirtyMu.Lock()
	defer t.dirtyMu.Unlock()
	return maps.Clone(t.dirty)
}

// startRide makes the pipeline's picks go to r until endRide.
func (pl *pipeline) startRide(r *Ride) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.ride = r
}

func (pl *pipeline) endRide() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.ride = nil
}

// launchRide takes r's place in the launch order and starts its handler,
// which waits for the ack entry's outcome (policy.mu held, the term not
// over).
func (pl *pipeline) launchRide(r *Ride) {
	pl.mu.Lock()
	prev, mine := pl.last, make(chan struct{})
	pl.last = mine
	pl.mu.Unlock()
	pl.t.goTerm(func(ctx context.Context) {
		res, err, unknown := r.wait(ctx)
		pl.handle(ctx, r.grants, r.to, prev, mine, res, err, unknown, false)
	})
}

// grantsOf splits an ack entry's result into the ack's own and the
// grants'. A result that is not an AckGrantResult applied no grant.
func grantsOf(res fsm.Result, err error) (ackRes fsm.Result, granted *fsm.GrantResult, gerr error) {
	if err != nil {
		return res, nil, err
	}
	if f := res.Failure(); f != nil {
		return res, nil, f
	}
	ag, ok := res.(*fsm.AckGrantResult)
	if !ok {
		return res, nil, fmt.Errorf("scheduler: an ack carrying grants answered %T", res)
	}
	return ag.Acked, ag.Granted, nil
}
