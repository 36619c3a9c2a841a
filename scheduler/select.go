package scheduler

import (
	"slices"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// QueueView is what picking reads of one queue's ready messages.
// fsm.QueueView implements it; it is valid only while the state's read
// lock is held.
type QueueView interface {
	Config() *fsmv1.QueueConfig
	// Priorities appends the priorities with ready messages, highest first.
	Priorities(dst []int32) []int32
	// NextKey is the active key at prio with the smallest Seq > afterSeq.
	NextKey(prio int32, afterSeq uint64) (fsm.KeyInfo, bool)
	// Key is one active key at prio.
	Key(prio int32, key string) (fsm.KeyInfo, bool)
	// NextReady is the key's ready message with the smallest id > afterID.
	NextReady(prio int32, key string, afterID uint64) (fsm.ReadyMessage, bool)
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
	keys   map[string]keyCursor // per priority: how far each key was scanned
	bs     []*bucket
	credit []int
	picks  []pick
}

type keyCursor struct {
	after uint64 // every ready id <= after is pending, taken or throttled
	skips int    // throttled messages stepped over
	done  bool   // nothing more to take from this key this call
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
	if in.Budget <= 0 {
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
	p := picker{qv: qv, in: in, cfg: cfg, cur: cur, bk: bk, sc: sc, res: res}
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
		n, done := p.serveKey(prio, k.Key, int(min(L.deficit, int64(limit-picked))))
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
func (p *picker) serveKey(prio int32, key string, limit int) (n int, done bool) {
	cur := p.sc.keys[key]
	defer func() { p.sc.keys[key] = cur }()
	for !cur.done && n < limit {
		m, ok := p.qv.NextReady(prio, key, cur.after)
		if !ok {
			cur.done = true
			break
		}
		cur.after = m.ID
		if _, pending := p.in.Pending[m.ID]; pending {
			continue
		}
		if !p.admit(m.ThrottleKeys) {
			cur.skips++
			if cur.skips >= throttleLookahead {
				cur.done = true
			}
			continue
		}
		i := p.nextConsumer()
		p.sc.credit[i]--
		p.cur.rrLast = p.in.Seqs[i]
		p.res.Picks = append(p.res.Picks, pick{ID: m.ID, Consumer: i})
		n++
	}
	return n, cur.done
}

// admit reports whether every throttle key of a message that has a rule
// has a token, and if so spends one from each (once per distinct key).
func (p *picker) admit(keys []string) bool {
	rules := p.cfg.GetThrottles()
	if len(keys) == 0 || len(rules) == 0 {
		return true
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
			if t := b.nextToken(); !p.res.Wake || t < p.res.WakeNs {
				p.res.Wake, p.res.WakeNs = true, t
			}
			return false
		}
		bs = append(bs, b)
	}
	for _, b := range bs {
		b.take(now)
	}
	return true
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
