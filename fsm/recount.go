package fsm

import (
	"maps"

	"github.com/raftq/raftq/fsm/state"
)

// RecountVersion is the log version that introduces RecountQueues; the
// leader proposes it only once the cluster version has reached it.
const RecountVersion = state.RecountVersion

// AuditCopy is one queue's counters with copy-on-write clones of the
// trees they derive from; its Recount walks them off the state lock.
type AuditCopy = state.AuditCopy

// AuditCopies takes, under the write lock for O(budget) tree clones, the
// counters and trees of the first budget queues whose names sort after
// after (see state.Store.AuditCopies). The leader's counter audit walks
// them afterwards without holding up Apply.
func (c Integrity) AuditCopies(after string, budget int) []AuditCopy {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.store.AuditCopies(after, budget)
}

// BytesDrift reports the node's payload byte total and the sum of the
// queues' byte counters it should equal.
func (c Integrity) BytesDrift() (have, want int64) {
	c.f.mu.RLock()
	defer c.f.mu.RUnlock()
	return c.f.store.BytesDrift()
}

// noteRepairs reports what a RecountQueues entry changed on this replica:
// a warning per queue with its counters before and after, and a count per
// queue for metrics. Every replica whose counters had drifted logs its own
// repair; one whose counters were right logs nothing. Called with the
// write lock held.
func (f *FSM) noteRepairs(res *RecountResult) {
	for _, r := range res.Repairs {
		f.log.Warn("queue counters disagreed with the queue's messages; recomputed them (a repair is a bug report)",
			"queue", r.Queue, "before", r.Before.String(), "after", r.After.String())
		if f.repairs == nil {
			f.repairs = map[string]uint64{}
		}
		f.repairs[r.Queue]++
	}
	if res.TotalBytesRepaired {
		f.log.Warn("node byte total disagreed with the queues' byte counters; recomputed it (a repair is a bug report)",
			"before", res.TotalBytesBefore, "after", res.TotalBytesAfter)
		if f.repairs == nil {
			f.repairs = map[string]uint64{}
		}
		f.repairs[""]++
	}
}

// CounterRepairs counts, per queue, the RecountQueues entries that changed
// that queue's counters on this node since it started ("" counts repairs
// of the node's byte total). Not state: a restart starts it again at 0, as
// Prometheus expects of a counter, and a restore keeps it.
func (c Integrity) CounterRepairs() map[string]uint64 {
	c.f.mu.RLock()
	defer c.f.mu.RUnlock()
	return maps.Clone(c.f.repairs)
}
