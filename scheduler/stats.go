package scheduler

import (
	"maps"
	"slices"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// Settling is told, before acks are proposed, which leases they settle. A
// consumer that acked a message is done with it, so from now until the ack
// applies that lease stops counting against its credit: the next grant is
// carried in the ack's own entry (CarryAck, log version 10) or, below
// that version, proposed alongside the ack instead of after its commit,
// which takes one of the two commits out of every delivery cycle. Only leases the view
// shows held under the ref's token count; done forgets them and must be
// called once the acks have been applied or have failed. A failed ack
// leaves the lease counted again: the consumer was over its credit by at
// most the leases of that ack, for as long as it took.
func (s *Scheduler) Settling(refs []*fsmv1.Ref) (done func()) {
	t := s.current()
	if t == nil {
		return func() {}
	}
	var marks []settleMark
	s.state.Read(func(v fsm.View) { marks = t.reg.settle(v, refs) })
	if len(marks) == 0 {
		return func() {}
	}
	if !s.carrying() {
		// The loop grants the freed credit now; otherwise the ack's own
		// entry will (CarryAck).
		s.kick()
	}
	return func() { t.reg.unsettle(marks) }
}

// Consumers is the number of consumers registered on queue.
func (s *Scheduler) Consumers(queue string) int {
	if t := s.current(); t != nil {
		return t.reg.count(queue)
	}
	return 0
}

// KeyStats describes a queue's fairness keys (ready messages, the DRR
// deficit of the key in service, weight; at most MaxKeyStats keys, highest
// priority first, then in activation order) and its throttle buckets (one
// per rule; a rule never used yet shows a full bucket).
func (s *Scheduler) KeyStats(queue string) (keys []*raftqv1.FairnessKeyStats, throttles []*raftqv1.ThrottleKeyStats) {
	now := s.clock.Now()
	var qp *queuePolicy
	nowNs := 0.0
	if t := s.current(); t != nil {
		t.policy.mu.Lock()
		defer t.policy.mu.Unlock()
		qp = t.policy.queues[queue]
		nowNs = float64(now.Sub(t.anchor))
	}
	s.state.Read(func(v fsm.View) {
		qv, ok := v.Queue(queue)
		if !ok {
			return
		}
		byKey := map[string]*raftqv1.FairnessKeyStats{}
		var prios []int32
		for _, p := range qv.Priorities(prios) {
			var L *drrLevel
			if qp != nil {
				L = qp.cur.levels[p]
			}
			for k, ok := qv.NextKey(p, 0); ok; k, ok = qv.NextKey(p, k.Seq) {
				st := byKey[k.Key]
				if st == nil {
					if len(keys) >= MaxKeyStats {
						break
					}
					st = &raftqv1.FairnessKeyStats{Key: k.Key, Weight: k.Weight}
					byKey[k.Key] = st
					keys = append(keys, st)
				}
				st.Pending += int64(k.Ready)
				if L != nil && L.seq == k.Seq {
					st.Deficit += L.deficit
				}
			}
		}
		rules := qv.Config().GetThrottles()
		for _, k := range slices.Sorted(maps.Keys(rules)) {
			r := rules[k]
			st := &raftqv1.ThrottleKeyStats{Key: k, RatePerSec: r.GetRatePerSec(), Burst: max(r.GetBurst(), 1), Tokens: float64(max(r.GetBurst(), 1))}
			if qp != nil {
				if b := qp.bk.m[k]; b != nil {
					b.setRule(r, nowNs, false)
					st.Tokens = b.tokens(nowNs)
				}
			}
			throttles = append(throttles, st)
		}
	})
	return keys, throttles
}

// ConsumerInfo describes one registered consumer for operators.
type ConsumerInfo struct {
	ID, Name, Address, Identity string
	Connected                   time.Time
	MaxInFlight                 int
	InFlight                    int // leases it holds
	Delivered                   int // pushed to its buffer since it registered
	Acked                       int // acks received for its leases
	Credit                      int // what it may still be granted now
}

// ListConsumers describes queue's consumers in registration order; it
// fails with ErrNotLeader when no term runs.
func (s *Scheduler) ListConsumers(queue string) ([]ConsumerInfo, error) {
	t := s.current()
	if t == nil {
		return nil, ErrNotLeader
	}
	var out []ConsumerInfo
	s.state.Read(func(v fsm.View) {
		t.reg.mu.Lock()
		defer t.reg.mu.Unlock()
		for _, c := range t.reg.queues[queue] {
			used := c.used(v, true)
			out = append(out, ConsumerInfo{
				ID: c.id, Name: c.name, Address: c.addr, Identity: c.ident,
				Connected:   c.connected,
				MaxInFlight: c.max,
				InFlight:    v.LeasesHeld(c.id),
				Delivered:   c.delivered,
				Acked:       c.acked,
				Credit:      c.creditLeft(used),
			})
		}
	})
	return out, nil
}
