package state

import "fmt"

// Verify recomputes every counter and index from the message trees and
// reports the first disagreement. Tests call it after every step; operators
// reach it through Cluster.Verify.
func (s *Store) Verify() error {
	// counts uses the tally recount uses (recount.go): the audit and
	// Verify cannot disagree on what a counter should hold.
	type counts struct {
		tally
		deadLettered int64
	}
	got := map[string]*counts{}
	for name := range s.queues {
		got[name] = &counts{}
	}
	var delayed, ttl, leases int
	consumers := map[string]int{}
	var err error
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		c := got[name]
		q.msgs.Ascend(func(it msgItem) bool {
			m := it.m
			if it.id != m.id {
				err = fmt.Errorf("%s: tree key %d holds message %d", name, it.id, m.id)
				return false
			}
			c.add(m)
			switch m.state {
			case stateReady:
				l := q.level(m.priority, false)
				if l == nil || l.keys[m.fairnessKey()] == nil || !l.keys[m.fairnessKey()].ids.Has(m.id) {
					err = fmt.Errorf("%s: ready message %d missing from its key queue", name, m.id)
					return false
				}
				if g := l.keys[m.fairnessKey()].groups[m.group()]; g == nil || !g.Has(m.id) {
					err = fmt.Errorf("%s: ready message %d missing from its throttle group", name, m.id)
					return false
				}
			case stateDelayed:
				delayed++
				if !s.delayed.Has(timedRef{at: m.visibleMs(), queue: name, id: m.id}) {
					err = fmt.Errorf("%s: delayed message %d missing from the delay index", name, m.id)
					return false
				}
			case stateLeased:
				leases++
				consumers[m.consumerID()]++
				if !s.leases.Has(timedRef{at: m.deadlineMs(), queue: name, id: m.id}) {
					err = fmt.Errorf("%s: leased message %d missing from the lease index", name, m.id)
					return false
				}
				if _, ok := s.consumers[m.consumerID()][queueMsg{name, m.id}]; !ok {
					err = fmt.Errorf("%s: leased message %d missing from consumer %q", name, m.id, m.consumerID())
					return false
				}
			}
			if m.expiresMs > 0 && m.state != stateLeased {
				ttl++
				if !s.ttl.Has(timedRef{at: m.expiresMs, queue: name, id: m.id}) {
					err = fmt.Errorf("%s: message %d missing from the TTL index", name, m.id)
					return false
				}
			}
			if m.origin() != "" {
				if oc := got[m.origin()]; oc != nil {
					oc.deadLettered++
				}
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, l := range q.levels {
			if c.readyPerLevel[l.priority] != int64(l.count) {
				return fmt.Errorf("%s: priority %d counts %d ready, structures hold %d", name, l.priority, l.count, c.readyPerLevel[l.priority])
			}
			if l.keyCount() != len(l.keys) {
				return fmt.Errorf("%s: priority %d has %d active keys but %d key queues", name, l.priority, l.keyCount(), len(l.keys))
			}
			l.eachKey(func(r keyRef) bool {
				if kq := l.keys[r.key]; kq == nil || kq.seq != r.seq || kq.weight < 1 {
					err = fmt.Errorf("%s: priority %d: active key %q (seq %d) does not match its key queue", name, l.priority, r.key, r.seq)
				} else if l.held.Has(r) != q.keyHeld(r.key) {
					err = fmt.Errorf("%s: priority %d: key %q is held %v but paused %v", name, l.priority, r.key, l.held.Has(r), q.keyHeld(r.key))
				}
				return err == nil
			})
			if err != nil {
				return err
			}
		}
		for _, l := range q.levels {
			for _, kq := range l.keys {
				n := 0
				for _, g := range kq.groups {
					n += g.Len()
				}
				if n != kq.ids.Len() {
					return fmt.Errorf("%s: key %q holds %d ready ids, its throttle groups %d", name, kq.key, kq.ids.Len(), n)
				}
			}
		}
		if err := q.verifyConcurrency(); err != nil {
			return err
		}
		if len(c.readyPerLevel) != len(q.levels) {
			return fmt.Errorf("%s: %d priority levels for %d priorities with ready messages", name, len(q.levels), len(c.readyPerLevel))
		}
		if q.dedup.Len() > s.dedupExp.Len() {
			return fmt.Errorf("%s: %d dedup entries but %d in the expiry index", name, q.dedup.Len(), s.dedupExp.Len())
		}
	}
	for _, name := range s.sortedQueueNames() {
		q, c := s.queues[name], got[name]
		if q.ready != c.ready || q.delayed != c.delayed || q.inFlight != c.inFlight || q.bytes != c.bytes || q.deadLettered != c.deadLettered {
			return fmt.Errorf("%s: counters ready=%d delayed=%d in_flight=%d bytes=%d dead_lettered=%d, structures ready=%d delayed=%d in_flight=%d bytes=%d dead_lettered=%d",
				name, q.ready, q.delayed, q.inFlight, q.bytes, q.deadLettered, c.ready, c.delayed, c.inFlight, c.bytes, c.deadLettered)
		}
	}
	var total int64
	for _, c := range got {
		total += c.bytes
	}
	if total != s.totalBytes {
		return fmt.Errorf("messages cost %d bytes across queues, counter says %d", total, s.totalBytes)
	}
	if s.delayed.Len() != delayed || s.ttl.Len() != ttl || s.leases.Len() != leases {
		return fmt.Errorf("global indexes delayed=%d ttl=%d leases=%d, messages delayed=%d ttl=%d leased=%d",
			s.delayed.Len(), s.ttl.Len(), s.leases.Len(), delayed, ttl, leases)
	}
	var dedupTotal int64
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		var b int64
		q.dedup.Ascend(func(e dedupEntry) bool { b += dedupCost(e.dedupID); return true })
		if b != q.dedupBytes {
			return fmt.Errorf("%s: dedup entries cost %d bytes, counter says %d", name, b, q.dedupBytes)
		}
		dedupTotal += b
	}
	if dedupTotal != s.dedupBytes {
		return fmt.Errorf("dedup entries cost %d bytes across queues, counter says %d", dedupTotal, s.dedupBytes)
	}
	if err := s.verifyRecent(); err != nil {
		return err
	}
	if err := s.verifyRedrives(); err != nil {
		return err
	}
	if len(consumers) != len(s.consumers) {
		return fmt.Errorf("%d consumers hold leases, index has %d", len(consumers), len(s.consumers))
	}
	for id, n := range consumers {
		if len(s.consumers[id]) != n {
			return fmt.Errorf("consumer %q holds %d leases, index has %d", id, n, len(s.consumers[id]))
		}
	}
	return nil
}

// verifyRecent checks that the expiry index lists exactly the recently
// settled outcomes the queues hold, and recomputes their cost.
func (s *Store) verifyRecent() error {
	var n int
	var bytes int64
	var err error
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		n += q.recent.Len()
		q.recent.Ascend(func(e recentEntry) bool {
			bytes += e.bytes()
			if !s.recentExp.Has(recentRef{at: e.atMs, queue: name, entry: e}) {
				err = fmt.Errorf("%s: recent %v entry of message %d missing from the expiry index", name, e.kind, e.messageID)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	nd, bd, err := s.verifyDeleted()
	if err != nil {
		return err
	}
	n, bytes = n+nd, bytes+bd
	if n != s.recentExp.Len() || n > s.maxRecent {
		return fmt.Errorf("%d recent entries in queues, %d in the expiry index (at most %d)", n, s.recentExp.Len(), s.maxRecent)
	}
	if bytes != s.recentBytes {
		return fmt.Errorf("recent entries cost %d bytes, counter says %d", bytes, s.recentBytes)
	}
	return nil
}

// verifyRedrives checks that the index of queues with redrive jobs lists
// exactly those, and each job is one that could be stepping.
func (s *Store) verifyRedrives() error {
	n := 0
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		if len(q.redrives) == 0 {
			continue
		}
		n++
		if _, ok := s.redriving[name]; !ok {
			return fmt.Errorf("%s: %d redrive jobs, not in the index", name, len(q.redrives))
		}
		for i, j := range q.redrives {
			if i > 0 && q.redrives[i-1].id >= j.id || j.moved >= j.total || j.byIDs != (len(j.ids) > 0) {
				return fmt.Errorf("%s: redrive job %d inconsistent (moved %d of %d)", name, j.id, j.moved, j.total)
			}
		}
	}
	if n != len(s.redriving) {
		return fmt.Errorf("%d queues with redrive jobs, index has %d", n, len(s.redriving))
	}
	return nil
}
