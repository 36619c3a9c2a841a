package state

import (
	"slices"

	"github.com/raftq/raftq/acl"
	"github.com/raftq/raftq/internal/btree"
)

// Store is the replicated data: queues, their messages and dedup entries,
// the indexes derived from them, and the scalars that travel in snapshots
// (the clock, the applied index, the cluster version). It is not safe for
// concurrent use: the fsm package serialises writers and readers.
//
// Every change to a message goes through put (the chokepoint): it
// unindexes the old value and indexes the new one, updating every counter
// as it goes, so counters cannot drift from the structures; Verify
// recomputes them.
type Store struct {
	queues    map[string]*queue
	delayed   *btree.BTreeG[timedRef]   // delayed messages by visible time
	ttl       *btree.BTreeG[timedRef]   // ready/delayed messages by TTL
	leases    *btree.BTreeG[timedRef]   // leased messages by deadline
	dedupExp  *btree.BTreeG[dedupRef]   // dedup entries by expiry
	recentExp *btree.BTreeG[recentRef]  // recently settled outcomes, oldest first (recent.go)
	deleted   *btree.BTreeG[deletedKey] // keyed deletes that succeeded, outside any queue (deletekeys.go)
	pauseExp  *btree.BTreeG[pauseRef]   // timed pauses by their end (pause.go)
	consumers map[string]map[queueMsg]struct{}

	totalBytes     int64 // what messages cost across queues (MessageCost) (derived, like the per-queue counters)
	dedupBytes     int64 // what dedup entries cost across queues (derived, dedupCost)
	recentBytes    int64 // what the recently settled outcomes cost, about (derived)
	maxQueuedBytes int64 // the cluster setting max_queued_bytes (admit.go); 0 = unlimited
	maxQueues      int64 // the cluster setting max_queues (GuardVersion); 0 = unlimited
	maxRecent      int   // MaxRecent; a field only so that a test can reach the bound
	sweepBudget    int   // SweepBudget; fields only so that a test can reach the bounds (each >= 1, or -1: all)
	entryBudget    int   // EntrySweepBudget
	lastNow        int64 // the state's clock (clock.go)
	leader         leaderClock
	appliedIndex   uint64
	keySeq         uint64 // source of activation sequence numbers; only their order matters (keyorder.go)
	clusterVersion uint32 // the replicated cluster version (starts at 1)
	auth           *Auth  // identities, tokens, grants (auth.go); replaced, never changed
	curIndex       uint64 // the index of the entry being applied (dead-letter records, redrive.go)
	// deadTimeFromMs: the state clock when the cluster reached
	// RedriveVersion, the dead-letter time of messages that have none.
	deadTimeFromMs int64
	// metaFounders: the meta group's founding voters, from the entry that
	// raised the cluster to HandoverVersion (handover.go).
	metaFounders []MetaServer
	redriving    map[string]struct{} // queues with redrive jobs in progress (derived)
	// history says whether the entry being applied records messages'
	// stories (its version is HistoryVersion or later: history.go). Set
	// by Begin for each entry; not state of its own.
	history bool
}

// New returns an empty store at cluster version 1.
func New() *Store {
	return &Store{
		queues:         map[string]*queue{},
		delayed:        btree.NewG(btreeDegree, lessTimedRef),
		ttl:            btree.NewG(btreeDegree, lessTimedRef),
		leases:         btree.NewG(btreeDegree, lessTimedRef),
		dedupExp:       btree.NewG(btreeDegree, lessDedupRef),
		recentExp:      btree.NewG(btreeDegree, lessRecentRef),
		deleted:        newDeletedTree(),
		pauseExp:       newPauseTree(),
		consumers:      map[string]map[queueMsg]struct{}{},
		clusterVersion: 1,
		auth:           acl.New(),
		redriving:      map[string]struct{}{},
		maxRecent:      MaxRecent,
		sweepBudget:    SweepBudget,
		entryBudget:    EntrySweepBudget,
	}
}

// AppliedIndex is the index of the last applied entry.
func (s *Store) AppliedIndex() uint64 { return s.appliedIndex }

// SetApplied records that the entry at index was applied (indexes never
// go back).
func (s *Store) SetApplied(index uint64) {
	if index > s.appliedIndex {
		s.appliedIndex = index
	}
}

// Now is the state's clock (clock.go).
func (s *Store) Now() int64 { return s.lastNow }

// ClusterVersion is the replicated cluster version.
func (s *Store) ClusterVersion() uint32 { return s.clusterVersion }

// Begin starts applying one entry: the clock moves (clock.go: by the
// entry's version, from its Raft term and its leader's now_ms), and what
// the passage of time does happens first (see advance). version is the
// log version the entry was proposed under; touched collects the queues
// the entry changes.
func (s *Store) Begin(index, term uint64, version uint32, nowMs int64, touched *Touched) *Tx {
	return s.begin(index, term, version, nowMs, touched, s.entryBudget)
}

// BeginTick is Begin for a Tick entry, whose only work is the sweep: from
// log version 13 it sweeps up to SweepBudget of each kind, where any
// other entry sweeps up to EntrySweepBudget (sweep.go).
func (s *Store) BeginTick(index, term uint64, version uint32, nowMs int64, touched *Touched) *Tx {
	return s.begin(index, term, version, nowMs, touched, s.sweepBudget)
}

func (s *Store) begin(index, term uint64, version uint32, nowMs int64, touched *Touched, budget int) *Tx {
	s.tick(term, version, nowMs)
	s.curIndex = index
	s.history = version >= HistoryVersion
	if version < SweepBudgetVersion {
		budget = -1 // everything due, as before
	}
	s.advance(budget, touched)
	return &Tx{s: s, index: index, version: version, stampMs: nowMs, touched: touched}
}

func (s *Store) sortedQueueNames() []string {
	names := make([]string, 0, len(s.queues))
	for n := range s.queues {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Touched collects the names of the queues a batch of entries changed, in
// first-touch order.
type Touched struct {
	seen map[string]struct{}
	list []string
}

// NewTouched returns an empty set.
func NewTouched() *Touched { return &Touched{seen: map[string]struct{}{}} }

func (t *Touched) add(q string) {
	if _, ok := t.seen[q]; !ok {
		t.seen[q] = struct{}{}
		t.list = append(t.list, q)
	}
}

// List is the touched queues in first-touch order.
func (t *Touched) List() []string { return t.list }

// unindex removes m from every derived index and counter of q. Together with
// index it is the single chokepoint every state transition goes through
// (put), so counters cannot drift from the structures.
func (s *Store) unindex(q *queue, m *message) {
	switch m.state {
	case stateReady:
		l := q.level(m.priority, false)
		kq := l.keys[m.fairnessKey()]
		q.concReadyOut(l, kq, m)
		kq.ids.Delete(m.id)
		g := m.group()
		if gt := kq.groups[g]; gt != nil {
			if gt != kq.ids { // a sole group is the key's ids (index)
				gt.Delete(m.id)
			}
			if gt.Len() == 0 {
				delete(kq.groups, g)
			}
		}
		l.count--
		q.ready--
		if kq.ids.Len() == 0 {
			l.active.Delete(keyRef{seq: kq.seq, key: kq.key})
			l.held.Delete(keyRef{seq: kq.seq, key: kq.key})
			delete(l.keys, kq.key)
			if l.count == 0 {
				q.dropLevel(l)
			}
		}
	case stateDelayed:
		s.delayed.Delete(timedRef{at: m.visibleMs(), queue: q.name, id: m.id})
		q.delayed--
		q.concOther(m, -1)
	case stateLeased:
		s.leases.Delete(timedRef{at: m.deadlineMs(), queue: q.name, id: m.id})
		q.inFlight--
		s.dropConsumerLease(m.consumerID(), q.name, m.id)
		q.concOther(m, -1)
	}
	if m.expiresMs > 0 && m.state != stateLeased {
		s.ttl.Delete(timedRef{at: m.expiresMs, queue: q.name, id: m.id})
	}
	// size walks the headers: once per call, not once per counter.
	size := m.size()
	q.bytes -= size
	s.totalBytes -= size
	if o := m.origin(); o != "" {
		if oq := s.queues[o]; oq != nil {
			oq.deadLettered--
		}
	}
}

func (s *Store) index(q *queue, m *message) {
	switch m.state {
	case stateReady:
		l := q.level(m.priority, true)
		kq := l.keys[m.fairnessKey()]
		if kq == nil {
			s.keySeq++
			kq = &keyQueue{key: m.fairnessKey(), seq: s.keySeq, ids: btree.NewG(btreeDegree, lessID), groups: map[string]*btree.BTreeG[uint64]{}}
			l.keys[kq.key] = kq
			q.place(l, kq)
		}
		if m.id >= kq.newest {
			kq.newest, kq.weight = m.id, m.weight
		}
		if m.body != nil {
			kq.last = m.body
			if !m.hasHeaders() {
				kq.body = m.body
			}
		}
		// The first group of a key is the key's ids tree itself, until a
		// second group appears: most keys' messages are all of one group,
		// and a second tree of the same ids cost 8.5 B per ready message
		// (issue 24). Then the first gets a copy of its own (a clone,
		// copied on write as the two change apart).
		g := m.group()
		gt := kq.groups[g]
		switch {
		case gt == nil && len(kq.groups) == 0:
			gt = kq.ids
			kq.groups[g] = gt
			kq.groupGen++
		case gt == nil:
			for g0, t0 := range kq.groups {
				if t0 == kq.ids {
					kq.groups[g0] = kq.ids.Clone()
				}
			}
			gt = btree.NewG(btreeDegree, lessID)
			kq.groups[g] = gt
			kq.groupGen++
		}
		kq.ids.ReplaceOrInsert(m.id)
		if gt != kq.ids {
			gt.ReplaceOrInsert(m.id)
		}
		l.count++
		q.ready++
		q.concReadyIn(l, kq, m)
	case stateDelayed:
		s.delayed.ReplaceOrInsert(timedRef{at: m.visibleMs(), queue: q.name, id: m.id})
		q.delayed++
		q.concOther(m, 1)
	case stateLeased:
		s.leases.ReplaceOrInsert(timedRef{at: m.deadlineMs(), queue: q.name, id: m.id})
		q.inFlight++
		s.addConsumerLease(m.consumerID(), q.name, m.id)
		q.concOther(m, 1)
	}
	if m.expiresMs > 0 && m.state != stateLeased {
		s.ttl.ReplaceOrInsert(timedRef{at: m.expiresMs, queue: q.name, id: m.id})
	}
	size := m.size()
	q.bytes += size
	s.totalBytes += size
	if o := m.origin(); o != "" {
		if oq := s.queues[o]; oq != nil {
			oq.deadLettered++
		}
	}
}

// put replaces old with next in q (either may be nil: insert or delete).
func (s *Store) put(q *queue, old, next *message) {
	if old != nil {
		s.unindex(q, old)
	}
	if next != nil {
		s.index(q, next)
		q.msgs.ReplaceOrInsert(msgItem{id: next.id, m: next})
	} else if old != nil {
		q.msgs.Delete(msgItem{id: old.id})
	}
	// After the message tree holds next: a cap of 1 reads its head's state.
	if next != nil && next.concurrencyKey() != "" {
		q.concSettle(next.concurrencyKey())
	} else if old != nil && old.concurrencyKey() != "" {
		q.concSettle(old.concurrencyKey())
	}
}

type queueMsg struct {
	queue string
	id    uint64
}

func (s *Store) addConsumerLease(consumer, q string, id uint64) {
	set := s.consumers[consumer]
	if set == nil {
		set = map[queueMsg]struct{}{}
		s.consumers[consumer] = set
	}
	set[queueMsg{q, id}] = struct{}{}
}

func (s *Store) dropConsumerLease(consumer, q string, id uint64) {
	set := s.consumers[consumer]
	delete(set, queueMsg{q, id})
	if len(set) == 0 {
		delete(s.consumers, consumer)
	}
}

// advance applies what the passage of time does: delayed messages become
// ready, TTLs pass (to the DLQ), dedup entries and recent outcomes lapse.
// It runs before every command, driven only by the command's time. Up to
// log version 12 it does all that is due; from version 13 each of the four
// sweeps does at most budget items (negative: all), oldest first, and
// leaves the rest to the next entries (sweep.go).
func (s *Store) advance(budget int, touched *Touched) {
	now := s.lastNow
	for n := budget; n != 0; n-- {
		r, ok := s.delayed.Min()
		if !ok || r.at > now {
			break
		}
		q := s.queues[r.queue]
		m := q.get(r.id)
		next := *m
		next.state = stateReady
		s.put(q, m, &next)
		touched.add(q.name)
	}
	for n := budget; n != 0; n-- {
		r, ok := s.ttl.Min()
		if !ok || r.at > now {
			break
		}
		q := s.queues[r.queue]
		s.deadLetter(q, q.get(r.id), "ttl", nil, touched)
	}
	for n := budget; n != 0; n-- {
		r, ok := s.dedupExp.Min()
		if !ok || r.at > now {
			break
		}
		s.dedupExp.DeleteMin()
		if q := s.queues[r.queue]; q != nil {
			// One removal instead of a lookup and a removal; an entry that
			// is not this ref's (never expected) is put back.
			if e, ok := q.dedup.Delete(dedupKey(r.dedupID)); ok && e.messageID != r.messageID {
				q.dedup.ReplaceOrInsert(e)
			} else if ok {
				s.dropDedup(q, e.dedupID)
			}
		}
	}
	s.expireRecent(budget)
	s.expirePauses(budget, touched)
}

// deadLetter moves m out of q into q's DLQ, or, for a queue without one (a
// DLQ itself), back to ready: a message is never silently dropped. end,
// when m is leased, is how its lease ended (nil from an older entry, or
// for a message not leased); the story records it (history.go).
func (s *Store) deadLetter(q *queue, m *message, reason string, end *ending, touched *Touched) {
	touched.add(q.name)
	dlq := s.queues[q.cfg.DeadLetterQueue]
	next := *m
	next.state, next.expiresMs = stateReady, 0
	next.setVisible(0)
	next.setLease(0, "", 0)
	stays := q.isDLQ || dlq == nil
	if s.history {
		st := m.story()
		if end != nil {
			e := *end
			if !stays {
				e.outcome = outcomeDeadLettered
			}
			st = st.ended(s.lastNow, m, e)
		}
		if !stays {
			st = st.withEvent(event{at: s.lastNow, kind: eventDeadLettered, who: dlq.name, text: cutUTF8(reason, MaxAttemptReasonBytes)})
		}
		next.setStory(st)
	}
	if stays {
		s.put(q, m, &next)
		return
	}
	s.put(q, m, nil)
	next.setDeadLetter(q.name, reason)
	if s.clusterVersion >= RedriveVersion {
		d := next.dead() // its own, made by setDeadLetter
		d.atMs, d.atIndex = s.lastNow, s.curIndex
	}
	s.put(dlq, nil, &next)
	q.deadLetteredApplied++
	touched.add(dlq.name)
}

// makeDLQ turns q into a dead-letter queue: it has no DLQ of its own.
func (s *Store) makeDLQ(q *queue) {
	if q.isDLQ {
		return
	}
	old := q.cfg.GetDeadLetterQueue()
	q.isDLQ = true
	q.raw.DeadLetterQueue = ""
	q.cfg = effectiveConfig(q.raw, "")
	if od := s.queues[old]; od != nil && od.autoDLQ && s.servedBy(old) == 0 && od.msgs.Len() == 0 {
		s.dropQueue(od)
	}
}

// servedBy counts the queues that name dlq as their dead-letter queue.
func (s *Store) servedBy(dlq string) int {
	n := 0
	for _, q := range s.queues {
		if q.cfg != nil && q.cfg.DeadLetterQueue == dlq {
			n++
		}
	}
	return n
}

// dropQueue removes q and every message in it, in id order.
func (s *Store) dropQueue(q *queue) {
	var all []*message
	q.msgs.Ascend(func(it msgItem) bool { all = append(all, it.m); return true })
	for _, m := range all {
		s.put(q, m, nil)
	}
	q.dedup.Ascend(func(e dedupEntry) bool {
		s.dedupExp.Delete(dedupRef{at: e.expiresMs, messageID: e.messageID})
		return true
	})
	s.dedupBytes -= q.dedupBytes
	s.dropRecent(q)
	delete(s.redriving, q.name)
	s.dropPauses(q)
	delete(s.queues, q.name)
}

// returnLeased ends a lease that counted as a delivery (nack, expiry,
// release) as end says: past max_deliveries or its TTL the message is
// dead-lettered.
func (s *Store) returnLeased(q *queue, m *message, delayMs int64, end *ending, touched *Touched) {
	switch {
	case m.expiresMs > 0 && m.expiresMs <= s.lastNow:
		s.deadLetter(q, m, "ttl", end, touched)
	case !q.isDLQ && m.attempts >= q.cfg.MaxDeliveries:
		s.deadLetter(q, m, "max_deliveries", end, touched)
	default:
		next := *m
		if s.history {
			next.setStory(m.story().ended(s.lastNow, m, *end))
		}
		s.unlease(q, m, &next, delayMs, touched)
	}
}

// unlease stores next (a copy of m) as ready, or delayed for delayMs.
func (s *Store) unlease(q *queue, m, next *message, delayMs int64, touched *Touched) {
	next.state = stateReady
	next.setLease(0, "", 0)
	if delayMs > 0 {
		next.state = stateDelayed
		next.setVisible(s.lastNow + delayMs)
	}
	s.put(q, m, next)
	touched.add(q.name)
}
