package state

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Counters are the numbers put keeps for one queue, which recount derives
// again from the message trees. A disagreement is drift: put is the one
// writer, so drift means a bug (or, in tests, an injected fault).
type Counters struct {
	Ready, Delayed, InFlight, Bytes int64
	// DeadLettered: messages from this queue now in its dead-letter queue.
	DeadLettered int64
	// ReadyByPriority lists the ready count of each priority level,
	// highest priority first.
	ReadyByPriority []PriorityCount
}

// PriorityCount is the ready count of one priority level.
type PriorityCount struct {
	Priority int32
	Ready    int64
}

// Equal reports whether two sets of counters agree.
func (c Counters) Equal(o Counters) bool {
	return c.Ready == o.Ready && c.Delayed == o.Delayed && c.InFlight == o.InFlight &&
		c.Bytes == o.Bytes && c.DeadLettered == o.DeadLettered && slices.Equal(c.ReadyByPriority, o.ReadyByPriority)
}

func (c Counters) String() string {
	return fmt.Sprintf("ready=%d delayed=%d in_flight=%d bytes=%d dead_lettered=%d by_priority=%v",
		c.Ready, c.Delayed, c.InFlight, c.Bytes, c.DeadLettered, c.ReadyByPriority)
}

// tally counts messages the way put's counters do; Verify and recount
// share it, so they cannot count differently.
type tally struct {
	ready, delayed, inFlight, bytes int64
	readyPerLevel                   map[int32]int64
}

func (t *tally) add(m *message) {
	t.bytes += m.size()
	switch m.state {
	case stateReady:
		t.ready++
		if t.readyPerLevel == nil {
			t.readyPerLevel = map[int32]int64{}
		}
		t.readyPerLevel[m.priority]++
	case stateDelayed:
		t.delayed++
	case stateLeased:
		t.inFlight++
	}
}

// counters is what q's counters hold now.
func (q *queue) counters() Counters {
	c := Counters{Ready: q.ready, Delayed: q.delayed, InFlight: q.inFlight, Bytes: q.bytes, DeadLettered: q.deadLettered}
	for _, l := range q.levels {
		c.ReadyByPriority = append(c.ReadyByPriority, PriorityCount{Priority: l.priority, Ready: int64(l.count)})
	}
	return c
}

// recountTrees derives a queue's counters from its message tree and its
// dead-letter queue's (either may be nil). Messages that name a queue as
// their origin are only ever in that queue's dead-letter queue (deadLetter
// is the one writer of origin, and a queue's dead-letter queue never
// changes), so the DLQ is the only other tree to walk.
func recountTrees(name string, msgs, dlq *btree.BTreeG[msgItem]) Counters {
	var t tally
	if msgs != nil {
		msgs.Ascend(func(it msgItem) bool { t.add(it.m); return true })
	}
	c := Counters{Ready: t.ready, Delayed: t.delayed, InFlight: t.inFlight, Bytes: t.bytes}
	if dlq != nil {
		dlq.Ascend(func(it msgItem) bool {
			if it.m.origin() == name {
				c.DeadLettered++
			}
			return true
		})
	}
	for p, n := range t.readyPerLevel {
		c.ReadyByPriority = append(c.ReadyByPriority, PriorityCount{Priority: p, Ready: n})
	}
	slices.SortFunc(c.ReadyByPriority, func(a, b PriorityCount) int { return cmp.Compare(b.Priority, a.Priority) })
	return c
}

// dlqOf is q's dead-letter queue, if it has one other than itself.
func (s *Store) dlqOf(q *queue) *queue {
	if q.isDLQ || q.cfg == nil || q.cfg.DeadLetterQueue == "" || q.cfg.DeadLetterQueue == q.name {
		return nil
	}
	return s.queues[q.cfg.DeadLetterQueue]
}

// Recount derives one queue's counters from its structures, returning
// what the counters hold and what they should hold. O(messages of the
// queue and of its dead-letter queue).
func (s *Store) Recount(name string) (have, want Counters, ok bool) {
	q := s.queues[name]
	if q == nil {
		return Counters{}, Counters{}, false
	}
	var dlqMsgs *btree.BTreeG[msgItem]
	if d := s.dlqOf(q); d != nil {
		dlqMsgs = d.msgs
	}
	return q.counters(), recountTrees(name, q.msgs, dlqMsgs), true
}

// BytesDrift reports the node's byte total and the sum of the queues'
// byte counters, which recounting sets it to. O(queues).
func (s *Store) BytesDrift() (have, want int64) {
	for _, q := range s.queues {
		want += q.bytes
	}
	return s.totalBytes, want
}

// AuditCopy is one queue's counters and copy-on-write clones of the trees
// they derive from, taken together under the writer's exclusion so the
// walk (Counters.Recount) can run off the lock.
type AuditCopy struct {
	Queue     string
	have      Counters
	msgs, dlq *btree.BTreeG[msgItem]
}

// AuditCopies freezes, for the first budget queues whose names sort after
// after, their counters and trees: O(queues) to pick the names (no sort
// of the whole list) and O(budget) clones. It returns the copies in name
// order; fewer than budget means the rotation reached the end. Clone marks
// the trees shared, so, like Freeze, it needs the writer's exclusion.
func (s *Store) AuditCopies(after string, budget int) []AuditCopy {
	names := make([]string, 0, budget)
	for name := range s.queues {
		if name <= after {
			continue
		}
		i, _ := slices.BinarySearch(names, name)
		if i >= budget {
			continue
		}
		names = slices.Insert(names, i, name)
		if len(names) > budget {
			names = names[:budget]
		}
	}
	out := make([]AuditCopy, 0, len(names))
	for _, name := range names {
		q := s.queues[name]
		c := AuditCopy{Queue: name, have: q.counters(), msgs: q.msgs.Clone()}
		if d := s.dlqOf(q); d != nil {
			c.dlq = d.msgs.Clone()
		}
		out = append(out, c)
	}
	return out
}

// Recount walks the copy's trees: what its counters held, and what they
// should have held, at the moment it was taken.
func (c AuditCopy) Recount() (have, want Counters) {
	return c.have, recountTrees(c.Queue, c.msgs, c.dlq)
}

// Repair is what recounting changed in one queue.
type Repair struct {
	Queue         string
	Before, After Counters
}

// RecountQueues (log version 8) sets the named queues' counters to what
// their structures hold, and the node's byte total to the sum of the
// queues' byte counters. It reads nothing from the command but names, so
// every replica, recounting its own trees (equal on every replica, as
// digests check), ends with the same counters. Unknown names are skipped
// (the queue may have been deleted since the leader audited it). The
// result lists the queues whose counters changed here.
func (tx *Tx) RecountQueues(c *fsmv1.RecountQueues) *RecountResult {
	res := &RecountResult{}
	names := slices.Clone(c.GetQueues())
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names {
		have, want, ok := tx.s.Recount(name)
		if !ok || have.Equal(want) {
			continue
		}
		q := tx.s.queues[name]
		q.ready, q.delayed, q.inFlight, q.bytes, q.deadLettered = want.Ready, want.Delayed, want.InFlight, want.Bytes, want.DeadLettered
		for _, l := range q.levels {
			l.count = 0
			for _, pc := range want.ReadyByPriority {
				if pc.Priority == l.priority {
					l.count = int(pc.Ready)
				}
			}
		}
		res.Repairs = append(res.Repairs, Repair{Queue: name, Before: have, After: q.counters()})
		tx.touched.add(name)
	}
	if have, want := tx.s.BytesDrift(); have != want {
		tx.s.totalBytes = want
		res.TotalBytesBefore, res.TotalBytesAfter, res.TotalBytesRepaired = have, want, true
	}
	return res
}
