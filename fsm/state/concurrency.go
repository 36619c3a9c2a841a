package state

import (
	"fmt"
	"slices"

	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// ConcurrencyVersion is the log version of concurrency keys
// (EnqueueMessage.concurrency_key, QueueConfig.concurrency_limit and
// concurrency_limits): from it a grant that would put more messages of a
// key in flight than its cap, or, under a cap of 1, a message that is not
// its key's next, is refused as the entry applies, on every replica alike,
// whatever the leader proposed. Entries of earlier versions ignore the
// fields (as older builds, which do not know them, do).
const ConcurrencyVersion uint32 = 19

// MaxConcurrencyLimits bounds QueueConfig.concurrency_limits (per-key
// overrides; each one is a map entry the config carries in every entry
// that sets it and in every snapshot).
const MaxConcurrencyLimits = 10_000

// A concurrency key's messages in flight are counted from the messages
// themselves (index and unindex keep concKey.inFlight with the leases), so
// the count is derived state: a restore rebuilds it by putting each
// message, and a new leader reads the old leader's leases in it. Nothing
// of it is in snapshots or digests but the messages' keys and the caps.
//
// What the scheduler must not do is walk the keys that are blocked. Each
// fairness key at each priority counts its *open* ready messages, those
// the cap would let through now (keyQueue.open), and the level keeps the
// fairness keys with any open message in activation order (level.open),
// which QueueView.NextKey walks instead of every active key. A
// concurrency key's contribution to those counts is one of three modes:
//
//   - all: every ready message of the key is open (no cap, or fewer in
//     flight than a cap above 1);
//   - head: only the key's next message in delivery order (priority, then
//     id), which must be ready (a cap of 1 with nothing in flight; a
//     delayed or backing-off head blocks the key: order first);
//   - none: the key is at its cap (or its head is not ready).
//
// A message's own change adjusts its fairness key's count directly while
// the mode is all; a change of mode moves the key's whole contribution,
// one step per (priority, fairness key) the key has ready messages in
// (concKey.where), which is one in the common case of a tenant being both.

// concMode is what a concurrency key contributes to keyQueue.open.
type concMode uint8

const (
	concNone concMode = iota
	concAll
	concHead
)

// concKey is one concurrency key of a queue with messages in it (derived).
type concKey struct {
	key      string
	inFlight int
	// pend holds the key's ready and delayed messages in delivery order:
	// its minimum is the head a cap of 1 waits for.
	pend *btree.BTreeG[prioID]
	// where counts the key's ready messages per (priority, fairness key).
	where map[whereRef]int
	// mode and head (with headAt) are the contribution currently counted
	// in the fairness keys' open counts.
	mode   concMode
	head   uint64
	headAt whereRef
}

type prioID struct {
	prio int32
	id   uint64
	m    *message // the stored copy (not part of the order): its state and fairness key, without a lookup
}

// lessPrioID is delivery order: higher priority first, then enqueue order.
func lessPrioID(a, b prioID) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.id < b.id
}

type whereRef struct {
	prio int32
	key  string
}

// concurrencyKey is the message's key as the entry's version reads it:
// entries before ConcurrencyVersion never had one.
func (tx *Tx) concurrencyKey(em *fsmv1.EnqueueMessage) string {
	if tx.version < ConcurrencyVersion {
		return ""
	}
	return em.GetConcurrencyKey()
}

// stripConcurrencyKeys is b without concurrency keys, for an entry before
// ConcurrencyVersion (which an older build validates, counts and stores
// without them); b itself if it has none.
func stripConcurrencyKeys(b *fsmv1.EnqueueBatch) *fsmv1.EnqueueBatch {
	if !slices.ContainsFunc(b.GetMessages(), func(m *fsmv1.EnqueueMessage) bool { return m.GetConcurrencyKey() != "" }) {
		return b
	}
	out := &fsmv1.EnqueueBatch{Queue: b.GetQueue(), Messages: make([]*fsmv1.EnqueueMessage, len(b.GetMessages()))}
	for i, m := range b.GetMessages() {
		if m.GetConcurrencyKey() != "" {
			m = proto.Clone(m).(*fsmv1.EnqueueMessage)
			m.ConcurrencyKey = ""
		}
		out.Messages[i] = m
	}
	return out
}

// stripConcurrency clears what an entry before ConcurrencyVersion cannot
// have set (an older build would ignore the fields), on a copy.
func (tx *Tx) stripConcurrency(c *fsmv1.QueueConfig) *fsmv1.QueueConfig {
	if tx.version >= ConcurrencyVersion || c == nil || c.ConcurrencyLimit == 0 && c.ConcurrencyLimits == nil {
		return c
	}
	out := cloneConfig(c)
	out.ConcurrencyLimit, out.ConcurrencyLimits = 0, nil
	return out
}

// validateConcurrency checks the caps of a client-supplied config.
func validateConcurrency(c *fsmv1.QueueConfig) error {
	if c.ConcurrencyLimit < 0 {
		return fmt.Errorf("%w: config.concurrency_limit is negative (%d)", ErrInvalid, c.ConcurrencyLimit)
	}
	if len(c.ConcurrencyLimits) > MaxConcurrencyLimits {
		return fmt.Errorf("%w: config.concurrency_limits has %d keys, the limit is %d", ErrInvalid, len(c.ConcurrencyLimits), MaxConcurrencyLimits)
	}
	for k, v := range c.ConcurrencyLimits {
		if k == "" || len(k) > MaxKeyLen {
			return fmt.Errorf("%w: config.concurrency_limits key %q must be 1-%d bytes", ErrInvalid, k, MaxKeyLen)
		}
		if v < 0 {
			return fmt.Errorf("%w: config.concurrency_limits[%q] is negative (%d)", ErrInvalid, k, v)
		}
	}
	return nil
}

// capOf is the cap of concurrency key ck (0: none).
func (q *queue) capOf(ck string) int32 {
	if v, ok := q.cfg.GetConcurrencyLimits()[ck]; ok {
		return v
	}
	return q.cfg.GetConcurrencyLimit()
}

// concFor is q's record of ck, created empty.
func (q *queue) concFor(ck string) *concKey {
	c := q.conc[ck]
	if c == nil {
		if q.conc == nil {
			q.conc = map[string]*concKey{}
		}
		c = &concKey{key: ck, pend: btree.NewG(8, lessPrioID), where: map[whereRef]int{}, mode: concAll}
		q.conc[ck] = c
	}
	return c
}

// addOpen changes kq's count of open messages by d, keeping l.open: the
// keys with an open message that are not paused (pause.go), so NextKey
// walks only keys the state would grant a message of.
func (q *queue) addOpen(l *level, kq *keyQueue, d int) {
	was := kq.open
	kq.open += d
	switch {
	case was == 0 && kq.open > 0 && !q.keyHeld(kq.key):
		l.open.ReplaceOrInsert(keyRef{seq: kq.seq, key: kq.key})
	case was > 0 && kq.open == 0:
		l.open.Delete(keyRef{seq: kq.seq, key: kq.key})
	}
}

// concReadyIn is index's part for a ready message of l's key kq: it is
// open unless its concurrency key's mode says otherwise.
func (q *queue) concReadyIn(l *level, kq *keyQueue, m *message) {
	ck := m.concurrencyKey()
	if ck == "" {
		q.addOpen(l, kq, 1)
		return
	}
	c := q.concFor(ck)
	c.where[whereRef{m.priority, kq.key}]++
	c.pend.ReplaceOrInsert(prioID{m.priority, m.id, m})
	if c.mode == concAll {
		q.addOpen(l, kq, 1)
	}
}

// concReadyOut is unindex's part for a ready message, before kq may go.
func (q *queue) concReadyOut(l *level, kq *keyQueue, m *message) {
	ck := m.concurrencyKey()
	if ck == "" {
		q.addOpen(l, kq, -1)
		return
	}
	c := q.conc[ck]
	w := whereRef{m.priority, kq.key}
	if c.where[w]--; c.where[w] == 0 {
		delete(c.where, w)
	}
	c.pend.Delete(prioID{prio: m.priority, id: m.id})
	switch {
	case c.mode == concAll:
		q.addOpen(l, kq, -1)
	case c.mode == concHead && c.head == m.id:
		q.addOpen(l, kq, -1)
		c.mode = concNone
	}
}

// concOther is index's (d = 1) and unindex's (d = -1) part for a delayed
// or leased message.
func (q *queue) concOther(m *message, d int) {
	ck := m.concurrencyKey()
	if ck == "" {
		return
	}
	c := q.conc[ck]
	if c == nil {
		c = q.concFor(ck)
	}
	switch m.state {
	case stateDelayed:
		if d > 0 {
			c.pend.ReplaceOrInsert(prioID{m.priority, m.id, m})
		} else {
			c.pend.Delete(prioID{prio: m.priority, id: m.id})
		}
	case stateLeased:
		c.inFlight += d
	}
}

// concSettle brings ck's contribution in line with its cap after a change
// (put, or a config change), and forgets a key with no message left.
func (q *queue) concSettle(ck string) {
	c := q.conc[ck]
	if c == nil {
		return
	}
	mode, head, at := q.concWant(c)
	if mode != c.mode || mode == concHead && head != c.head {
		q.concMove(c, -1)
		c.mode, c.head, c.headAt = mode, head, at
		q.concMove(c, 1)
	}
	if c.inFlight == 0 && c.pend.Len() == 0 {
		delete(q.conc, ck)
	}
}

// concWant is the mode ck's cap and messages call for.
func (q *queue) concWant(c *concKey) (concMode, uint64, whereRef) {
	limit := q.capOf(c.key)
	switch {
	case limit <= 0:
		return concAll, 0, whereRef{}
	case limit == 1:
		if c.inFlight > 0 {
			return concNone, 0, whereRef{}
		}
		h, ok := c.pend.Min()
		if !ok {
			return concNone, 0, whereRef{}
		}
		m := h.m
		if m.state != stateReady {
			return concNone, 0, whereRef{} // a delayed head holds its key: order first
		}
		return concHead, h.id, whereRef{m.priority, m.fairnessKey()}
	case c.inFlight < int(limit):
		return concAll, 0, whereRef{}
	}
	return concNone, 0, whereRef{}
}

// concMove adds (d = 1) or removes (d = -1) c's current contribution to
// the open counts. The order of the where map does not matter: each step
// changes one key's count, and the resulting set is the same in any order.
func (q *queue) concMove(c *concKey, d int) {
	switch c.mode {
	case concAll:
		for w, n := range c.where {
			l := q.level(w.prio, false)
			q.addOpen(l, l.keys[w.key], d*n)
		}
	case concHead:
		l := q.level(c.headAt.prio, false)
		q.addOpen(l, l.keys[c.headAt.key], d)
	}
}

// concSettleAll re-reads every key's cap after the config changed
// (lowering a cap revokes nothing: keys over it are merely blocked).
func (q *queue) concSettleAll() {
	keys := make([]string, 0, len(q.conc))
	for k := range q.conc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.concSettle(k)
	}
}

// concGrantable is the grant rule of ConcurrencyVersion: nil if m may be
// leased now under its key's cap.
func (q *queue) concGrantable(m *message) error {
	ck := m.concurrencyKey()
	if ck == "" {
		return nil
	}
	limit := q.capOf(ck)
	if limit <= 0 {
		return nil
	}
	c := q.conc[ck]
	switch {
	case c.mode == concAll, c.mode == concHead && c.head == m.id:
		return nil
	case int(limit) <= c.inFlight:
		return fmt.Errorf("%w: concurrency key %q has %d in flight, its cap is %d", ErrLimit, ck, c.inFlight, limit)
	}
	return fmt.Errorf("%w: concurrency key %q has a cap of 1 and message %d is not its next", ErrLimit, ck, m.id)
}

// ConcurrencyInFlight is how many messages of concurrency key ck of the
// queue are in flight (leased).
func (qv QueueView) ConcurrencyInFlight(ck string) int {
	if c := qv.q.conc[ck]; c != nil {
		return c.inFlight
	}
	return 0
}

// ConcurrencyRoom is how many more messages of concurrency key ck the
// state would grant now, with id the message asked about: capped is false
// for a key without a cap; under a cap of 1 only the key's next message
// has room.
func (qv QueueView) ConcurrencyRoom(ck string, id uint64) (room int, capped bool) {
	limit := qv.q.capOf(ck)
	if ck == "" || limit <= 0 {
		return 0, false
	}
	c := qv.q.conc[ck]
	switch {
	case c == nil:
		return int(limit), true
	case c.mode == concAll:
		return int(limit) - c.inFlight, true
	case c.mode == concHead && c.head == id:
		return 1, true
	}
	return 0, true
}

// HasConcurrencyCaps reports whether the queue caps any concurrency key.
func (qv QueueView) HasConcurrencyCaps() bool {
	return qv.q.cfg.GetConcurrencyLimit() > 0 || len(qv.q.cfg.GetConcurrencyLimits()) > 0
}

// ConcurrencyKeyOf is the concurrency key of message id ("" if none or
// gone).
func (qv QueueView) ConcurrencyKeyOf(id uint64) string {
	if m := qv.q.get(id); m != nil {
		return m.concurrencyKey()
	}
	return ""
}

func cloneConfig(c *fsmv1.QueueConfig) *fsmv1.QueueConfig {
	return proto.Clone(c).(*fsmv1.QueueConfig)
}

// verifyConcurrency recomputes, from q's messages alone, what every
// concurrency key has in flight and which ready messages are open, and
// compares the derived records with it (Verify).
func (q *queue) verifyConcurrency() error {
	type want struct {
		inFlight, pend int
		head           prioID
		hasHead        bool
	}
	keys := map[string]*want{}
	q.msgs.Ascend(func(it msgItem) bool {
		ck := it.m.concurrencyKey()
		if ck == "" {
			return true
		}
		w := keys[ck]
		if w == nil {
			w = &want{}
			keys[ck] = w
		}
		if it.m.state == stateLeased {
			w.inFlight++
			return true
		}
		w.pend++
		if p := (prioID{prio: it.m.priority, id: it.m.id}); !w.hasHead || lessPrioID(p, w.head) {
			w.head, w.hasHead = p, true
		}
		return true
	})
	if len(keys) != len(q.conc) {
		return fmt.Errorf("%s: %d concurrency keys with messages, %d recorded", q.name, len(keys), len(q.conc))
	}
	for ck, w := range keys {
		c := q.conc[ck]
		if c == nil || c.inFlight != w.inFlight || c.pend.Len() != w.pend {
			return fmt.Errorf("%s: concurrency key %q holds %d in flight and %d waiting, its record %v", q.name, ck, w.inFlight, w.pend, c)
		}
	}
	open := map[*keyQueue]int{}
	q.msgs.Ascend(func(it msgItem) bool {
		m := it.m
		if m.state != stateReady {
			return true
		}
		ck := m.concurrencyKey()
		ok := true
		if limit := q.capOf(ck); ck != "" && limit > 0 {
			w := keys[ck]
			if limit == 1 {
				ok = w.inFlight == 0 && w.head.prio == m.priority && w.head.id == m.id
			} else {
				ok = w.inFlight < int(limit)
			}
		}
		if ok {
			open[q.level(m.priority, false).keys[m.fairnessKey()]]++
		}
		return true
	})
	for _, l := range q.levels {
		n := 0
		for _, kq := range l.keys {
			if kq.open != open[kq] {
				return fmt.Errorf("%s: fairness key %q at priority %d counts %d open messages, %d are", q.name, kq.key, l.priority, kq.open, open[kq])
			}
			inRing := l.open.Has(keyRef{seq: kq.seq, key: kq.key})
			switch {
			case kq.open > 0 && !q.keyHeld(kq.key):
				n++
				if !inRing {
					return fmt.Errorf("%s: fairness key %q at priority %d is open but not in the open ring", q.name, kq.key, l.priority)
				}
			case inRing:
				// A paused key is out of the ring whatever its caps allow.
				return fmt.Errorf("%s: fairness key %q at priority %d is in the open ring but paused or not open", q.name, kq.key, l.priority)
			}
		}
		if l.open.Len() != n {
			return fmt.Errorf("%s: priority %d has %d keys in the open ring, %d are open", q.name, l.priority, l.open.Len(), n)
		}
	}
	return nil
}
