package state

import (
	"slices"

	"github.com/raftq/raftq/internal/btree"
)

// The bounded sweep (log version 13). What the passage of time does
// (delayed messages become ready, TTLs pass to the DLQ, dedup entries and
// recent outcomes lapse) happens in advance, at the start of every entry,
// under the write lock. Up to version 12 one entry did all that was due:
// a million messages enqueued with the same delay_ms or TTL came due in
// one entry that held the lock for seconds on every replica, stalling
// applies, reads and the scheduler. From version 13 each of the four
// sweeps does at most SweepBudget items per entry, oldest first (the
// indexes' order, the same on every replica), and leaves the rest to the
// next entries; the leader proposes a Tick while any is left
// (View.SweepPending, scheduler/sweep.go).
//
// What is left due waits a little longer, which every time rule allows
// (each waits at least as long as asked). Where a command would see the
// difference, it first does the due work it depends on, so that nothing
// due is skipped or done twice and no command acts as if it had not come
// due:
//   - a grant of a message whose TTL has passed dead-letters it (the
//     grant answers not found, as it would after the sweep), and one of a
//     message whose delay has passed makes it ready first;
//   - purge, delete, redrive and turning a queue into a DLQ first settle
//     that queue's due delays and TTLs (settleDue), in the sweep's order;
//   - a lease lookup (ack, nack, extend, expire) of a message whose TTL
//     has passed answers not found, as it would after the sweep;
//   - a recent outcome or delete key past its window counts as forgotten
//     (within), and an expired dedup entry never counted as a duplicate.
// Admission still counts what is due and not yet swept (a message whose
// TTL passed counts in its queue's depth until it moves), so near a limit
// an enqueue may be refused a few entries longer: conservative, never
// past a limit.

// SweepBudget is how many items each of the four sweeps (delays, TTLs,
// dedup expiries, recent outcomes) does at most in a Tick entry of log
// version 13 or later, and EntrySweepBudget in any other entry: clients'
// entries carry little of a backlog (their latency stays near what it is
// without one) and the leader's Ticks, one in flight at a time, do the
// bulk. Measured (docs/benchmarks.md, BenchmarkDueSweep): a delayed
// message becoming ready costs a few µs, so a Tick holds the lock for
// milliseconds and another entry for a fraction of one.
const (
	SweepBudget      = 1024
	EntrySweepBudget = 64
)

// SweepBudgetVersion is the log version from which the sweep is bounded
// per entry (SweepBudget) and commands settle what they depend on.
const SweepBudgetVersion uint32 = 13

// SweepPending reports whether time-driven work is due by the state's
// clock and not yet done: the bounded sweep left it for later entries.
func (s *Store) SweepPending() bool {
	now := s.lastNow
	if r, ok := s.delayed.Min(); ok && r.at <= now {
		return true
	}
	if r, ok := s.ttl.Min(); ok && r.at <= now {
		return true
	}
	if r, ok := s.dedupExp.Min(); ok && r.at <= now {
		return true
	}
	if r, ok := s.recentExp.Min(); ok && !within(r.at, now) {
		return true
	}
	if r, ok := s.pauseExp.Min(); ok && r.at <= now {
		return true
	}
	return false
}

// settleDue does now, for q alone, what the bounded sweep left due in it:
// its due delayed messages become ready, then its due TTLs pass, each in
// the sweep's order. A command that acts on a whole queue (purge, delete,
// redrive, becoming a DLQ) calls it first, so it acts on what the queue
// holds once time has done its work. Below SweepBudgetVersion nothing is
// ever left due. It walks the due part of the indexes or q's messages,
// whichever is smaller: with nothing due, one step.
func (s *Store) settleDue(q *queue, touched *Touched) {
	now := s.lastNow
	byQueue := q.msgs.Len() < s.delayed.Len()+s.ttl.Len()
	due := func(idx *btree.BTreeG[timedRef], at func(*message) int64) []timedRef {
		var refs []timedRef
		if byQueue {
			q.msgs.Ascend(func(it msgItem) bool {
				if t := at(it.m); t != 0 && t <= now {
					refs = append(refs, timedRef{at: t, queue: q.name, id: it.id})
				}
				return true
			})
			slices.SortFunc(refs, func(a, b timedRef) int {
				if lessTimedRef(a, b) {
					return -1
				}
				return 1 // no two refs are equal: ids differ
			})
			return refs
		}
		idx.Ascend(func(r timedRef) bool {
			if r.at > now {
				return false
			}
			if r.queue == q.name {
				refs = append(refs, r)
			}
			return true
		})
		return refs
	}
	delayedAt := func(m *message) int64 {
		if m.state == stateDelayed {
			return m.visibleMs()
		}
		return 0
	}
	ttlAt := func(m *message) int64 {
		if m.state != stateLeased {
			return m.expiresMs
		}
		return 0
	}
	for _, r := range due(s.delayed, delayedAt) {
		m := q.get(r.id)
		next := *m
		next.state = stateReady
		s.put(q, m, &next)
		touched.add(q.name)
	}
	for _, r := range due(s.ttl, ttlAt) {
		s.deadLetter(q, q.get(r.id), "ttl", nil, touched)
	}
}

// settleGrant does the due work a grant of m depends on (log version 13):
// a message whose TTL has passed is dead-lettered (gone reports that it
// left q: the grant finds nothing, as after the sweep), one whose delay
// has passed is made ready. It returns the message to grant.
func (s *Store) settleGrant(q *queue, m *message, touched *Touched) (next *message, gone bool) {
	now := s.lastNow
	if m.state == stateLeased {
		return m, false
	}
	if m.expiresMs > 0 && m.expiresMs <= now {
		s.deadLetter(q, m, "ttl", nil, touched)
		if m = q.get(m.id); m == nil {
			return nil, true
		}
		// A queue without a DLQ (a DLQ itself) keeps it, ready.
	}
	if m.state == stateDelayed && m.visibleMs() <= now {
		ready := *m
		ready.state = stateReady
		s.put(q, m, &ready)
		touched.add(q.name)
		return &ready, false
	}
	return m, false
}

// leavesForTTL reports whether m's TTL has passed and the sweep, when it
// reaches it, moves it out of q (to q's DLQ): a lookup answers not found
// already, as it would after the sweep (log version 13).
func (s *Store) leavesForTTL(q *queue, m *message) bool {
	return m.state != stateLeased && m.expiresMs > 0 && m.expiresMs <= s.lastNow &&
		!q.isDLQ && s.queues[q.cfg.DeadLetterQueue] != nil
}
