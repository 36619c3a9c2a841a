package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Pauses (PauseVersion). A queue, or one fairness key of it, can be paused:
// nothing new of it is granted while enqueues, leases already out and the
// passage of time (delays, TTLs, lease expiry) go on. A pause is replicated
// state, kept per queue by key ("" stands for the whole queue, which is
// why the whole-queue pause and the default fairness key "" never mix: a
// key pause names a non-empty key), with the state-clock instant it ends
// at (0 = until resumed).
//
// Three things make it hold whatever the leader does:
//   - Grant refuses a message of a paused queue or key (ErrPaused), carried
//     grants included (Ack.grants goes through Grant), so no scheduler bug
//     can lease one;
//   - a paused key's ready keys leave the delivery ring (level.held): the
//     scheduler's round-robin never visits them, so 10,000 paused keys cost
//     a pass nothing; the whole-queue pause is one check (QueueView.Paused);
//   - a timed pause ends on the state clock: the instant is in pauseExp,
//     which NextDue reports (the leader proposes a Tick then, on any leader
//     after a failover, since the instant is state) and the sweep ends it
//     (advance), putting its keys back in the ring and touching the queue
//     so the scheduler looks again. Until the sweep reaches it, an expired
//     pause already refuses nothing (pausedAt reads the clock).
//
// Only a cluster at PauseVersion has pauses (the proposer refuses the RPCs
// below it and older entries ignore the commands), so snapshots of older
// cluster versions are unchanged; from it, QueueRecord.pauses carries them
// into snapshots and digests.

// PauseVersion is the log version that introduces PauseQueue/ResumeQueue
// and the grant rule that refuses a paused queue's or key's messages.
const PauseVersion uint32 = 17

// MaxPausedKeys bounds the fairness keys paused on their own per queue
// (the whole-queue pause does not count): one more is ErrLimit.
const MaxPausedKeys = 10_000

// pauseRef is a timed pause in the store's expiry index, by (at, queue, key).
type pauseRef struct {
	at    int64
	queue string
	key   string
}

func lessPauseRef(a, b pauseRef) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if c := cmp.Compare(a.queue, b.queue); c != 0 {
		return c < 0
	}
	return a.key < b.key
}

func newPauseTree() *btree.BTreeG[pauseRef] { return btree.NewG(btreeDegree, lessPauseRef) }

// pauseHolds reports whether a pause ending at until still holds at now.
func pauseHolds(until, now int64) bool { return until == 0 || now < until }

// keyHeld reports whether key's ready messages are kept out of the
// delivery ring: a non-empty key with a pause recorded (expired or not:
// the sweep ends it).
func (q *queue) keyHeld(key string) bool {
	if key == "" || q.pauses == nil {
		return false
	}
	_, ok := q.pauses[key]
	return ok
}

// pausedAt reports whether a message of fairness key key may not be
// granted at now: the whole queue or the key is paused.
func (q *queue) pausedAt(key string, now int64) bool {
	if q.pauses == nil {
		return false
	}
	if until, ok := q.pauses[""]; ok && pauseHolds(until, now) {
		return true
	}
	if key == "" {
		return false
	}
	until, ok := q.pauses[key]
	return ok && pauseHolds(until, now)
}

// pausedKeys counts the keys paused on their own.
func (q *queue) pausedKeys() int {
	n := len(q.pauses)
	if _, ok := q.pauses[""]; ok {
		n--
	}
	return n
}

// place puts an active key in its level's ring, or among the held keys
// when it is paused; an unpaused key with an open message (concurrency.go)
// also goes in the open ring NextKey walks.
func (q *queue) place(l *level, kq *keyQueue) {
	ref := keyRef{seq: kq.seq, key: kq.key}
	if q.keyHeld(kq.key) {
		l.held.ReplaceOrInsert(ref)
		return
	}
	l.active.ReplaceOrInsert(ref)
	if kq.open > 0 {
		l.open.ReplaceOrInsert(ref)
	}
}

// eachKey visits every key of l with ready messages, held or not, in
// activation order (what snapshots, Peek and the oldest-ready gauge see).
func (l *level) eachKey(fn func(keyRef) bool) {
	if l.held.Len() == 0 {
		l.active.Ascend(fn)
		return
	}
	var a, h []keyRef
	l.active.Ascend(func(r keyRef) bool { a = append(a, r); return true })
	l.held.Ascend(func(r keyRef) bool { h = append(h, r); return true })
	for len(a) > 0 || len(h) > 0 {
		var r keyRef
		if len(h) == 0 || len(a) > 0 && a[0].seq < h[0].seq {
			r, a = a[0], a[1:]
		} else {
			r, h = h[0], h[1:]
		}
		if !fn(r) {
			return
		}
	}
}

// keyCount is how many keys of l have ready messages, held or not.
func (l *level) keyCount() int { return l.active.Len() + l.held.Len() }

// setPause records q's pause of key until (0 = until resumed), replacing
// any earlier one's end.
func (s *Store) setPause(q *queue, key string, until int64) {
	old, had := q.pauses[key]
	if had && old > 0 {
		s.pauseExp.Delete(pauseRef{at: old, queue: q.name, key: key})
	}
	if q.pauses == nil {
		q.pauses = map[string]int64{}
	}
	q.pauses[key] = until
	if until > 0 {
		s.pauseExp.ReplaceOrInsert(pauseRef{at: until, queue: q.name, key: key})
	}
	if key != "" && !had {
		for _, l := range q.levels {
			if kq := l.keys[key]; kq != nil {
				ref := keyRef{seq: kq.seq, key: key}
				l.active.Delete(ref)
				l.open.Delete(ref) // paused: not walked whatever its caps allow
				l.held.ReplaceOrInsert(ref)
			}
		}
	}
}

// clearPause ends q's pause of key, if any.
func (s *Store) clearPause(q *queue, key string) {
	until, had := q.pauses[key]
	if !had {
		return
	}
	if until > 0 {
		s.pauseExp.Delete(pauseRef{at: until, queue: q.name, key: key})
	}
	delete(q.pauses, key)
	if len(q.pauses) == 0 {
		q.pauses = nil
	}
	if key != "" {
		for _, l := range q.levels {
			if kq := l.keys[key]; kq != nil {
				ref := keyRef{seq: kq.seq, key: key}
				l.held.Delete(ref)
				l.active.ReplaceOrInsert(ref)
				if kq.open > 0 {
					l.open.ReplaceOrInsert(ref) // walkable again if its caps allow
				}
			}
		}
	}
}

// dropPauses forgets a deleted queue's pauses.
func (s *Store) dropPauses(q *queue) {
	for key, until := range q.pauses {
		if until > 0 {
			s.pauseExp.Delete(pauseRef{at: until, queue: q.name, key: key})
		}
	}
	q.pauses = nil
}

// expirePauses ends up to budget (negative: all) timed pauses whose end
// has come, earliest first, and touches their queues so the scheduler
// looks at them again.
func (s *Store) expirePauses(budget int, touched *Touched) {
	now := s.lastNow
	for n := budget; n != 0; n-- {
		r, ok := s.pauseExp.Min()
		if !ok || r.at > now {
			return
		}
		q := s.queues[r.queue]
		s.clearPause(q, r.key)
		touched.add(q.name)
	}
}

// checkPauseTarget is what PauseQueue and ResumeQueue check first: the
// queue exists and the key is a fairness key's length.
func (tx *Tx) checkPauseTarget(name, key string) (*queue, error) {
	q := tx.s.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	if len(key) > MaxKeyLen {
		return nil, fmt.Errorf("%w: fairness_key is %d bytes, the limit is %d", ErrInvalid, len(key), MaxKeyLen)
	}
	return q, nil
}

// PauseQueue pauses a queue (empty key) or one fairness key of it for
// duration_ms of the state clock (0 = until resumed). A pause of the same
// queue or key replaces the old one's end. A key the queue has not seen is
// allowed: the pause holds when its messages arrive.
//
// It answers Done, not the queue's info: that lists up to MaxPausedKeys
// keys, sorted, which the write lock need not wait for (the edge reads it).
func (tx *Tx) PauseQueue(c *fsmv1.PauseQueue) *Done {
	q, err := tx.checkPauseTarget(c.GetName(), c.GetFairnessKey())
	if err != nil {
		return failed(err)
	}
	d := c.GetDurationMs()
	if d < 0 || d > MaxDurationMs {
		return failed(fmt.Errorf("%w: duration_ms is %d, it must be 0 (until resumed) to %d (%s)", ErrInvalid, d, int64(MaxDurationMs), HumanMs(MaxDurationMs)))
	}
	key := c.GetFairnessKey()
	if _, had := q.pauses[key]; key != "" && !had && q.pausedKeys() >= MaxPausedKeys {
		return failed(fmt.Errorf("%w: queue %s has %d fairness keys paused, the limit is %d; resume some first", ErrLimit, q.name, q.pausedKeys(), MaxPausedKeys))
	}
	var until int64
	if d > 0 {
		until = tx.s.lastNow + d
	}
	tx.s.setPause(q, key, until)
	tx.touched.add(q.name)
	return &Done{}
}

// ResumeQueue ends the pause of a queue (empty key: the whole-queue pause
// only) or of one key; one that is not paused is OK and changes nothing.
func (tx *Tx) ResumeQueue(c *fsmv1.ResumeQueue) *Done {
	q, err := tx.checkPauseTarget(c.GetName(), c.GetFairnessKey())
	if err != nil {
		return failed(err)
	}
	if _, had := q.pauses[c.GetFairnessKey()]; had {
		tx.s.clearPause(q, c.GetFairnessKey())
		tx.touched.add(q.name)
	}
	return &Done{}
}

// PausedKey is one fairness key's pause as QueueInfo shows it.
type PausedKey struct {
	Key     string
	UntilMs int64 // on the leader's clock (View instants); 0 = until resumed
}

// addPauses fills qi with q's pauses as they hold now: a pause whose end
// has come (the sweep not there yet) is not shown.
func (s *Store) addPauses(q *queue, qi *QueueInfo) {
	now, off := s.lastNow, s.leader.offset(s.lastNow)
	at := func(until int64) int64 {
		if until == 0 {
			return 0
		}
		return until + off
	}
	for _, key := range slices.Sorted(maps.Keys(q.pauses)) {
		until := q.pauses[key]
		if !pauseHolds(until, now) {
			continue
		}
		if key == "" {
			qi.Paused, qi.PausedUntilMs = true, at(until)
			continue
		}
		qi.PausedKeys = append(qi.PausedKeys, PausedKey{Key: key, UntilMs: at(until)})
	}
}

// pauseRecords lists q's pauses for a snapshot, by key (nil: none).
func (q *queue) pauseRecords() []*fsmv1.PauseRecord {
	if len(q.pauses) == 0 {
		return nil
	}
	out := make([]*fsmv1.PauseRecord, 0, len(q.pauses))
	for _, key := range slices.Sorted(maps.Keys(q.pauses)) {
		out = append(out, &fsmv1.PauseRecord{Key: key, UntilMs: q.pauses[key]})
	}
	return out
}

// loadPauses restores q's pauses from its snapshot record (before its
// messages are indexed, so held keys are placed as they arrive).
func (s *Store) loadPauses(q *queue, recs []*fsmv1.PauseRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if s.clusterVersion < PauseVersion {
		return fmt.Errorf("%w: pauses of %s at cluster version %d", ErrInvalid, q.name, s.clusterVersion)
	}
	for _, r := range recs {
		if _, dup := q.pauses[r.Key]; dup || len(r.Key) > MaxKeyLen || r.UntilMs < 0 {
			return fmt.Errorf("%w: pause of %s key %q (until %d) is repeated or out of range", ErrInvalid, q.name, r.Key, r.UntilMs)
		}
		s.setPause(q, r.Key, r.UntilMs)
	}
	if q.pausedKeys() > MaxPausedKeys {
		return fmt.Errorf("%w: %s has %d paused keys, the limit is %d", ErrInvalid, q.name, q.pausedKeys(), MaxPausedKeys)
	}
	return nil
}

// Paused reports whether the whole queue is paused now (the scheduler
// skips it); a paused key is out of NextKey's ring instead.
func (qv QueueView) Paused() bool {
	until, ok := qv.q.pauses[""]
	return ok && pauseHolds(until, qv.s.lastNow)
}

// PausedKeys counts the fairness keys paused on their own now (metrics).
func (qv QueueView) PausedKeys() int {
	n := 0
	for key, until := range qv.q.pauses {
		if key != "" && pauseHolds(until, qv.s.lastNow) {
			n++
		}
	}
	return n
}
