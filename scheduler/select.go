package scheduler

import (
	"math"
	"slices"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// QueueView is what picking reads of one queue's ready messages.
// fsm.QueueView implements it; it is valid only while the state's read
// lock is held.
type QueueView interface {
	Config() *fsmv1.QueueConfig
	// Ready is the number of ready messages.
	Ready() int64
	// Priorities appends the priorities with ready messages, highest first.
	Priorities(dst []int32) []int32
	// NextKey is the active key at prio with the smallest Seq > afterSeq.
	NextKey(prio int32, afterSeq uint64) (fsm.KeyInfo, bool)
	// Key is one active key at prio.
	Key(prio int32, key string) (fsm.KeyInfo, bool)
	// NextReady is the key's ready message with the smallest id > afterID.
	NextReady(prio int32, key string, afterID uint64) (fsm.ReadyMessage, bool)
	// ThrottleGroups appends the names of the key's throttle groups: its
	// ready messages split by the exact throttle keys they carry.
	ThrottleGroups(prio int32, key string, dst []string) []string
	// NextInGroup is the smallest ready id > afterID of one throttle group.
	NextInGroup(prio int32, key, group string, afterID uint64) (fsm.ReadyMessage, bool)
	// Paused reports a whole-queue pause (PauseQueue): nothing of it is
	// picked. A paused fairness key is simply not among NextKey's keys:
	// the state keeps it out of the ring, so picking never walks it.
	Paused() bool
	// HasConcurrencyCaps reports whether the queue caps any concurrency key.
	HasConcurrencyCaps() bool
	// ConcurrencyRoom is how many more messages of concurrency key ck the
	// state would grant now, asked for message id (under a cap of 1 only
	// the key's next message has room); capped is false for no cap.
	ConcurrencyRoom(ck string, id uint64) (room int, capped bool)
	// ConcurrencyKeyOf is the concurrency key of a message.
	ConcurrencyKeyOf(id uint64) string
}

// pickInput is what one queue's picking depends on besides the view, the
// cursors and the buckets.
type pickInput struct {
	// NowNs is the current instant in nanoseconds since the buckets'
	// origin (the term's start).
	NowNs float64
	// Budget is the most messages to pick.
	Budget int
	// Seqs is each consumer's registration sequence, ascending.
	Seqs []uint64
	// Credit is what each consumer (parallel to Seqs) may still be
	// granted. Picking reads it and does not change it.
	Credit []int
	// Pending holds the ids in grants proposed but not yet handled: they
	// are never picked again.
	Pending map[uint64]struct{}
}

// pick is one decision: message ID goes to the consumer at index Consumer
// of pickInput.Seqs.
type pick struct {
	ID       uint64
	Consumer int
}

// pickResult is what one call of pickQueue decided.
type pickResult struct {
	// Picks in the order they were made (the order of the grants).
	Picks []pick
	// Wake reports that a throttle blocked a pick; WakeNs is when the
	// earliest such bucket next has a token (ns since the origin).
	Wake   bool
	WakeNs float64
}

// cursors is one queue's picking position, kept by the caller across
// calls: the round-robin cursor over consumers and the DRR cursor of
// every priority.
type cursors struct {
	rrLast uint64 // seq of the consumer that got the latest pick
	levels map[int32]*drrLevel
}

// drrLevel is the deficit round-robin cursor of one priority: the key in
// service (by activation seq) and what it may still send this round.
type drrLevel struct {
	seq     uint64
	key     string
	deficit int64
}

// pickScratch is memory picking reuses between calls; what it holds on
// entry does not matter.
type pickScratch struct {
	prios  []int32
	keys   map[string]keyCursor // per priority: where each key's scan stands
	groups []groupCursor        // the keyCursors' groups, one run per key
	names  []string
	bs     []*bucket
	credit []int
	picks  []pick
	// conc counts, per concurrency key, the messages pending or picked in
	// this call: the room the state reports is before them.
	conc map[string]int
}

// keyCursor is how far one call has scanned a key: its throttle groups
// still open are groups[from:to] of the scratch, each with its next
// message. A group leaves the run when it is exhausted or throttled.
type keyCursor struct {
	from, to  int
	opened    int     // groups the run started with
	throttled int     // of them, closed by a throttle
	untilNs   float64 // the earliest token among the throttles met
}

// groupCursor is one throttle group of a key during a call: every id of
// the group below next is pending or taken.
type groupCursor struct {
	name string
	next fsm.ReadyMessage
}

// pickQueue chooses up to in.Budget (message, consumer) pairs of one queue:
// highest priority first (a priority whose messages are all pending or
// throttled falls through to the next), deficit round-robin over the
// fairness keys of a priority by weight in activation order, FIFO within a
// key, skipping messages whose throttle buckets are empty, and assigning
// each pick round-robin over the consumers with credit.
//
// It is a pure function of its arguments: it takes no lock, reads no
// clock and changes nothing but *cur, *bk (tokens spent, rules synced)
// and the scratch sc. The result's Picks alias sc.
func pickQueue(qv QueueView, in pickInput, cur *cursors, bk *buckets, sc *pickScratch) pickResult {
	res := pickResult{Picks: sc.picks[:0]}
	total := 0
	for _, c := range in.Credit {
		total += max(c, 0)
	}
	in.Budget = min(in.Budget, total)
	if in.Budget <= 0 || qv.Paused() {
		// A paused queue: one check, no walk. The state refuses its grants
		// anyway; its resume or its end touches the queue, so the loop
		// looks again then.
		return res
	}
	if cur.levels == nil {
		cur.levels = map[int32]*drrLevel{}
	}
	if sc.keys == nil {
		sc.keys = map[string]keyCursor{}
	}
	sc.credit = append(sc.credit[:0], in.Credit...)
	cfg := qv.Config()
	bk.sync(cfg, in.NowNs)
	p := picker{qv: qv, in: in, cfg: cfg, cur: cur, bk: bk, sc: sc, res: res, capped: qv.HasConcurrencyCaps()}
	if p.capped {
		// Pending grants use room the state does not know of yet (what
		// pending is, is bounded by the pipeline, not by the backlog).
		if sc.conc == nil {
			sc.conc = map[string]int{}
		}
		clear(sc.conc)
		for id := range in.Pending {
			if ck := qv.ConcurrencyKeyOf(id); ck != "" {
				sc.conc[ck]++
			}
		}
	}
	sc.prios = qv.Priorities(sc.prios[:0])
	for _, prio := range sc.prios {
		if len(p.res.Picks) >= in.Budget {
			break
		}
		L := cur.levels[prio]
		if L == nil {
			L = &drrLevel{}
			cur.levels[prio] = L
		}
		clear(sc.keys)
		sc.groups = sc.groups[:0]
		p.drr(prio, L, in.Budget-len(p.res.Picks))
	}
	if len(cur.levels) > len(sc.prios) {
		for prio := range cur.levels {
			if !slices.Contains(sc.prios, prio) {
				delete(cur.levels, prio)
			}
		}
	}
	sc.picks = p.res.Picks
	return p.res
}

// picker carries one pickQueue call's arguments through its steps.
type picker struct {
	qv  QueueView
	in  pickInput
	cfg *fsmv1.QueueConfig
	cur *cursors
	bk  *buckets
	sc  *pickScratch
	res pickResult
	// capped: the queue caps concurrency keys (ConcurrencyRoom is asked).
	capped bool
}

// nextKey is the active key after seq in activation order, wrapping round.
func nextKey(qv QueueView, prio int32, seq uint64) (fsm.KeyInfo, bool) {
	if k, ok := qv.NextKey(prio, seq); ok {
		return k, true
	}
	return qv.NextKey(prio, 0)
}

// drr runs deficit round-robin over the keys of one priority, in
// activation order, starting where the previous call stopped. Each visit
// gives a key quantum*weight messages; a key that runs out of deliverable
// messages (empty, all pending, or throttled) forfeits the rest of its
// turn. It stops after picking limit, or after a full round without a pick.
func (p *picker) drr(prio int32, L *drrLevel, limit int) {
	quantum := int64(max(p.cfg.GetFairnessQuantum(), 1))
	var k fsm.KeyInfo
	fresh := true
	if L.seq != 0 && L.deficit > 0 {
		// Resume the key in service, unless it emptied since: a key that
		// re-entered has a new seq and starts a new turn at the ring's end.
		if ki, ok := p.qv.Key(prio, L.key); ok && ki.Seq == L.seq {
			k, fresh = ki, false
		}
	}
	if fresh {
		ki, ok := nextKey(p.qv, prio, L.seq)
		if !ok {
			return
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
		n, done := p.serveKey(prio, k, int(min(L.deficit, int64(limit-picked))))
		picked += n
		L.deficit -= int64(n)
		if L.deficit > 0 && !done {
			break // out of budget mid-turn: resume here next call
		}
		if n > 0 {
			idleSince = 0
		} else if idleSince == 0 {
			idleSince = k.Seq
		}
		L.deficit = 0
		next, ok := nextKey(p.qv, prio, k.Seq)
		if !ok {
			break
		}
		alone = next.Seq == k.Seq
		k, fresh = next, true
	}
}

// serveKey takes up to limit messages of one key in FIFO order, skipping
// pending and throttled ones. done reports that the key has nothing more to
// give this call.
//
// The key's ready messages come in throttle groups (messages carrying the
// same throttle keys), and each group is walked in id order; the next
// message is the smallest head among the groups still open. A group whose
// head is throttled closes for the rest of the call with everything behind
// it: every message of the group needs the same buckets, and within a call
// buckets only lose tokens. So a throttled backlog costs one bucket check
// per group, not one step per message, whatever its depth.
func (p *picker) serveKey(prio int32, k fsm.KeyInfo, limit int) (n int, done bool) {
	key := k.Key
	cur, ok := p.sc.keys[key]
	if !ok {
		if until, parked := p.bk.isParked(prio, k, p.in.NowNs); parked {
			p.wakeAt(until)
			return 0, true
		}
		cur = p.openKey(prio, key)
	}
	defer func() { p.sc.keys[key] = cur }()
	gs := p.sc.groups
	for cur.to > cur.from && n < limit {
		best := cur.from
		for i := cur.from + 1; i < cur.to; i++ {
			if gs[i].next.ID < gs[best].next.ID {
				best = i
			}
		}
		g := &gs[best]
		m := g.next
		var more bool
		g.next, more = p.qv.NextInGroup(prio, key, g.name, m.ID)
		if _, pending := p.in.Pending[m.ID]; pending {
			if !more {
				cur.close(gs, best)
			}
			continue
		}
		capped := false
		if p.capped && m.ConcurrencyKey != "" {
			// A group holds one concurrency key's messages: a key without
			// room closes the group's whole backlog, as a throttle does.
			// Under a cap of 1 only the key's head has room, so the rest
			// wait behind it, wherever it is (order first).
			room, ok := p.qv.ConcurrencyRoom(m.ConcurrencyKey, m.ID)
			if ok && p.sc.conc[m.ConcurrencyKey] >= room {
				cur.close(gs, best)
				continue
			}
			capped = ok
		}
		if until, ok := p.admit(m.ThrottleKeys); !ok {
			cur.close(gs, best)
			cur.throttled++
			cur.untilNs = min(cur.untilNs, until)
			if cur.throttled == cur.opened && n == 0 {
				// Every group is throttled and nothing was taken: no
				// message of the key can go before a token arrives.
				p.bk.park(prio, k, cur.untilNs, p.qv.Ready())
			}
			continue
		}
		if !more {
			cur.close(gs, best)
		}
		if capped {
			p.sc.conc[m.ConcurrencyKey]++
		}
		i := p.nextConsumer()
		p.sc.credit[i]--
		p.cur.rrLast = p.in.Seqs[i]
		p.res.Picks = append(p.res.Picks, pick{ID: m.ID, Consumer: i})
		n++
	}
	return n, cur.to == cur.from
}

// openKey starts the call's scan of a key: one cursor per throttle group,
// at the group's first ready message, appended to the scratch as one run.
func (p *picker) openKey(prio int32, key string) keyCursor {
	cur := keyCursor{from: len(p.sc.groups)}
	p.sc.names = p.qv.ThrottleGroups(prio, key, p.sc.names[:0])
	for _, name := range p.sc.names {
		if m, ok := p.qv.NextInGroup(prio, key, name, 0); ok {
			p.sc.groups = append(p.sc.groups, groupCursor{name: name, next: m})
		}
	}
	cur.to = len(p.sc.groups)
	cur.opened, cur.untilNs = cur.to-cur.from, math.Inf(1)
	return cur
}

// close removes group i from the key's run (order within a run does not
// matter: the next message is chosen by id).
func (c *keyCursor) close(gs []groupCursor, i int) {
	c.to--
	gs[i] = gs[c.to]
}

// admit reports whether every throttle key of a message that has a rule
// has a token, and if so spends one from each (once per distinct key).
// When it refuses, untilNs is when the refusing bucket has a token.
func (p *picker) admit(keys []string) (untilNs float64, ok bool) {
	rules := p.cfg.GetThrottles()
	if len(keys) == 0 || len(rules) == 0 {
		return 0, true
	}
	now := p.in.NowNs
	bs := p.sc.bs[:0]
	defer func() { p.sc.bs = bs }()
	for _, k := range keys {
		r := rules[k]
		if r == nil {
			continue
		}
		b := p.bk.get(k, r, now)
		if slices.Contains(bs, b) {
			continue
		}
		if !b.conforms(now) {
			t := b.nextToken()
			p.wakeAt(t)
			return t, false
		}
		bs = append(bs, b)
	}
	for _, b := range bs {
		b.take(now)
	}
	return 0, true
}

// wakeAt asks for the loop to come back at ns (since the buckets' origin)
// if nothing earlier is due.
func (p *picker) wakeAt(ns float64) {
	if !p.res.Wake || ns < p.res.WakeNs {
		p.res.Wake, p.res.WakeNs = true, ns
	}
}

// nextConsumer is the index of the consumer after the round-robin cursor
// (by registration sequence) that has credit. Picking stops at the budget,
// which pickQueue bounds by the total credit, so one always has some.
func (p *picker) nextConsumer() int {
	n := len(p.in.Seqs)
	start, _ := slices.BinarySearch(p.in.Seqs, p.cur.rrLast+1)
	for i := range n {
		j := (start + i) % n
		if p.sc.credit[j] > 0 {
			return j
		}
	}
	return -1
}
