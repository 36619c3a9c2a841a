package scheduler

import (
	"slices"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func (s *Scheduler) queueSched(name string) *queueSched {
	qs := s.queues[name]
	if qs == nil {
		qs = &queueSched{
			name:    name,
			levels:  map[int32]*drrLevel{},
			buckets: map[string]*bucket{},
			pending: map[uint64]struct{}{},
		}
		s.queues[name] = qs
		i, _ := slices.BinarySearch(s.qnames, name)
		s.qnames = slices.Insert(s.qnames, i, name)
	}
	return qs
}

// selectQueue picks up to budget (message, consumer) pairs from one queue
// and appends them to the pending batch. It returns how many it picked.
func (s *Scheduler) selectQueue(v fsm.View, qv fsm.QueueView, qs *queueSched, ps *passState, budget int) int {
	total := 0
	qs.credit = qs.credit[:0]
	for _, c := range qs.consumers {
		// Credit is what the consumer may still be granted: its limit less
		// the leases it holds (per the FSM: acks, nacks, expiries and
		// releases show up here) less grants not yet handled. A buffered
		// delivery whose lease expired before the stream read it still
		// takes buffer space, so the buffer caps credit too; nothing
		// signals when the stream reads it, hence the recheck.
		used := v.LeasesHeld(c.id)
		for id := range c.settling {
			// Acked by the consumer, the ack not yet applied: the
			// consumer is done with it, so it frees credit now. Once the
			// ack applies the lease is gone from the view and from this
			// count at the same time.
			if v.HoldsLease(c.id, qs.name, id) {
				used--
			}
		}
		if b := len(c.ch); b > used {
			used = b
			ps.wakeAt(ps.now.Add(bufferRecheck))
		}
		cr := max(c.max-used-c.pending, 0)
		if c.limit > 0 {
			cr = min(cr, max(c.limit-c.delivered-c.pending, 0))
		}
		qs.credit = append(qs.credit, cr)
		total += cr
	}
	budget = min(budget, total)
	if budget <= 0 {
		return 0
	}
	cfg := qv.Config()
	qs.syncRules(cfg, ps.nowNs)
	ps.prios = qv.Priorities(ps.prios[:0])
	picked := 0
	for _, p := range ps.prios {
		if picked >= budget {
			break
		}
		L := qs.levels[p]
		if L == nil {
			L = &drrLevel{}
			qs.levels[p] = L
		}
		clear(ps.cursor)
		picked += s.drr(qv, qs, cfg, p, L, ps, budget-picked)
	}
	if len(qs.levels) > len(ps.prios) {
		for p := range qs.levels {
			if !slices.Contains(ps.prios, p) {
				delete(qs.levels, p)
			}
		}
	}
	return picked
}

// nextKey is the active key after seq in activation order, wrapping round.
func nextKey(qv fsm.QueueView, prio int32, seq uint64) (fsm.KeyInfo, bool) {
	if k, ok := qv.NextKey(prio, seq); ok {
		return k, true
	}
	return qv.NextKey(prio, 0)
}

// drr runs deficit round-robin over the keys of one priority, in
// activation order, starting where the previous pass stopped. Each visit
// gives a key quantum*weight messages; a key that runs out of deliverable
// messages (empty, all pending, or throttled) forfeits the rest of its
// turn. It stops after picking limit, or after a full round without a pick.
func (s *Scheduler) drr(qv fsm.QueueView, qs *queueSched, cfg *fsmv1.QueueConfig, prio int32, L *drrLevel, ps *passState, limit int) int {
	quantum := int64(max(cfg.GetFairnessQuantum(), 1))
	var k fsm.KeyInfo
	fresh := true
	if L.seq != 0 && L.deficit > 0 {
		// Resume the key in service, unless it emptied since: a key that
		// re-entered has a new seq and starts a new turn at the ring's end.
		if ki, ok := qv.Key(prio, L.key); ok && ki.Seq == L.seq {
			k, fresh = ki, false
		}
	}
	if fresh {
		ki, ok := nextKey(qv, prio, L.seq)
		if !ok {
			return 0
		}
		k = ki
	}
	picked := 0
	var idleSince uint64 // first key visited without a pick since the last pick
	alone := false       // the ring wrapped onto the same key: it is the only one
	for picked < limit {
		if fresh {
			if k.Seq == idleSince {
				break // a whole round without a pick
			}
			qw := quantum * int64(max(k.Weight, 1))
			if alone {
				// Several rounds of a one-key ring at once (plain FIFO);
				// what is left over is less than one turn, as if visited
				// round by round.
				qw *= (int64(limit-picked) + qw - 1) / qw
			}
			L.seq, L.key, L.deficit = k.Seq, k.Key, qw
		}
		n, done := s.serveKey(qv, qs, cfg, prio, k.Key, ps, int(min(L.deficit, int64(limit-picked))))
		picked += n
		L.deficit -= int64(n)
		if L.deficit > 0 && !done {
			break // out of budget mid-turn: resume here next pass
		}
		if n > 0 {
			idleSince = 0
		} else if idleSince == 0 {
			idleSince = k.Seq
		}
		L.deficit = 0
		next, ok := nextKey(qv, prio, k.Seq)
		if !ok {
			break
		}
		alone = next.Seq == k.Seq
		k, fresh = next, true
	}
	return picked
}

// serveKey takes up to limit messages of one key in FIFO order, skipping
// pending and throttled ones. done reports that the key has nothing more to
// give this pass.
func (s *Scheduler) serveKey(qv fsm.QueueView, qs *queueSched, cfg *fsmv1.QueueConfig, prio int32, key string, ps *passState, limit int) (n int, done bool) {
	cur := ps.cursor[key]
	defer func() { ps.cursor[key] = cur }()
	for !cur.done && n < limit {
		m, ok := qv.NextReady(prio, key, cur.after)
		if !ok {
			cur.done = true
			break
		}
		cur.after = m.ID
		if _, p := qs.pending[m.ID]; p {
			continue
		}
		if !qs.admit(m.ThrottleKeys, cfg.GetThrottles(), ps) {
			cur.skips++
			if cur.skips >= throttleLookahead {
				cur.done = true
			}
			continue
		}
		s.emit(qs, cfg, m.ID, ps)
		n++
	}
	return n, cur.done
}

// syncRules brings the buckets in line with the queue's throttle rules when
// its config changed (UpdateQueue): changed rules keep their tokens, clamped;
// removed rules drop their bucket.
func (qs *queueSched) syncRules(cfg *fsmv1.QueueConfig, now float64) {
	if cfg == qs.cfg {
		return
	}
	qs.cfg = cfg
	rules := cfg.GetThrottles()
	for k, b := range qs.buckets {
		if r := rules[k]; r == nil {
			delete(qs.buckets, k)
		} else {
			b.setRule(r, now, false)
		}
	}
}

// admit reports whether every throttle key of a message that has a rule
// has a token, and if so spends one from each (once per distinct key).
func (qs *queueSched) admit(keys []string, rules map[string]*fsmv1.ThrottleRule, ps *passState) bool {
	if len(keys) == 0 || len(rules) == 0 {
		return true
	}
	ps.bs = ps.bs[:0]
	for _, k := range keys {
		r := rules[k]
		if r == nil {
			continue
		}
		b := qs.buckets[k]
		if b == nil {
			b = newBucket(r, ps.nowNs)
			qs.buckets[k] = b
		}
		if slices.Contains(ps.bs, b) {
			continue
		}
		if !b.conforms(ps.nowNs) {
			ps.wakeAt(nsToTime(ps.anchor, b.nextToken()))
			return false
		}
		ps.bs = append(ps.bs, b)
	}
	for _, b := range ps.bs {
		b.take(ps.nowNs)
	}
	return true
}

// nextConsumer is the index of the consumer after the round-robin cursor
// (by registration sequence) that has credit; the caller knows one has.
func (qs *queueSched) nextConsumer() int {
	n := len(qs.consumers)
	start, _ := slices.BinarySearchFunc(qs.consumers, qs.rrLast+1, func(c *Consumer, seq uint64) int {
		switch {
		case c.seq < seq:
			return -1
		case c.seq > seq:
			return 1
		}
		return 0
	})
	for i := range n {
		j := (start + i) % n
		if qs.credit[j] > 0 {
			return j
		}
	}
	return -1
}

// emit assigns a picked message to the next consumer with credit and adds
// the grant to the batch, proposing the batch when it is full.
func (s *Scheduler) emit(qs *queueSched, cfg *fsmv1.QueueConfig, id uint64, ps *passState) {
	i := qs.nextConsumer()
	c := qs.consumers[i]
	qs.credit[i]--
	qs.rrLast = c.seq
	c.pending++
	qs.pending[id] = struct{}{}
	vis := c.visibilityMs
	if vis <= 0 {
		vis = cfg.GetVisibilityTimeoutMs()
	}
	s.batch = append(s.batch, &fsmv1.Grant{Queue: qs.name, MessageId: id, ConsumerId: c.id, DeadlineMs: ps.nowMs + vis})
	s.batchTo = append(s.batchTo, grantTarget{qs, c})
	if len(s.batch) >= s.cfg.MaxGrantBatch {
		s.flush()
	}
}
