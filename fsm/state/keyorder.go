package state

import (
	"fmt"
	"slices"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Delivery order within a priority depends on two things messages alone do
// not record: the order in which fairness keys became active (deficit
// round-robin visits them in that order) and each key's weight (the weight
// of the newest message it was given while active). Before cluster version
// 3 a restore re-derived both from message-id order, so a replica that
// installed a snapshot delivered in a different order from a live one with
// an equal digest. From version 3 they are state: listed in snapshots (and
// so in digests) and restored as listed.

// keyOrder lists q's active keys by priority (highest first), then in
// activation order: what a snapshot of format 3 records. O(active keys).
func (q *queue) keyOrder() []*fsmv1.KeyOrder {
	var out []*fsmv1.KeyOrder
	for _, l := range q.levels {
		l.eachKey(func(r keyRef) bool {
			kq := l.keys[r.key]
			out = append(out, &fsmv1.KeyOrder{Priority: l.priority, Key: kq.key, Weight: kq.weight, Newest: kq.newest})
			return true
		})
	}
	return out
}

// loadKeyOrder replaces the order and weights that indexing q's messages
// derived with the recorded ones. The records must name exactly the active
// keys of each level, in keyOrder's order.
func (s *Store) loadKeyOrder(q *queue, recs []*fsmv1.KeyOrder) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: key order of %s: %s", ErrInvalid, q.name, fmt.Sprintf(format, args...))
	}
	i := 0
	for _, l := range q.levels {
		n := len(l.keys)
		if i+n > len(recs) {
			return bad("%d keys recorded, more are active", len(recs))
		}
		seen := make(map[string]bool, n)
		l.active.Clear(false)
		l.held.Clear(false)
		l.open.Clear(false)
		for _, r := range recs[i : i+n] {
			kq := l.keys[r.Key]
			switch {
			case r.Priority != l.priority:
				return bad("priority %d where %d was expected", r.Priority, l.priority)
			case kq == nil || seen[r.Key]:
				return bad("key %q at priority %d is not active or listed twice", r.Key, l.priority)
			case r.Weight < 1 || r.Weight > MaxWeight:
				return bad("key %q has weight %d", r.Key, r.Weight)
			}
			seen[r.Key] = true
			s.keySeq++
			kq.seq, kq.weight, kq.newest = s.keySeq, r.Weight, r.Newest
			q.place(l, kq)
		}
		i += n
	}
	if i != len(recs) {
		return bad("%d keys recorded, %d active", len(recs), i)
	}
	return nil
}

// canonicalKeyOrder gives every level's keys an order and weights that
// are a function of the messages alone: keys by their oldest ready
// message, each at the weight of its newest. The entry that raises the
// cluster to keyOrderVersion calls it, so replicas whose order diverged
// under the older rule (one restored, one live) agree from then on, as
// their digests will check.
func (s *Store) canonicalKeyOrder() {
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		for _, l := range q.levels {
			keys := make([]*keyQueue, 0, len(l.keys))
			for _, kq := range l.keys {
				keys = append(keys, kq)
			}
			oldest := func(kq *keyQueue) uint64 { id, _ := kq.ids.Min(); return id }
			slices.SortFunc(keys, func(a, b *keyQueue) int { return cmpUint64(oldest(a), oldest(b)) })
			l.active.Clear(false)
			l.held.Clear(false)
			l.open.Clear(false)
			for _, kq := range keys {
				s.keySeq++
				newest, _ := kq.ids.Max()
				kq.seq, kq.newest, kq.weight = s.keySeq, newest, q.get(newest).weight
				q.place(l, kq)
			}
		}
	}
}
