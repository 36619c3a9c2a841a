package state

import (
	"cmp"
	"fmt"

	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Recently settled outcomes (log version 7). A client that lost the answer
// to an ack, nack, purge or redrive (leadership lost after the entry
// committed, a connection cut) retries it, and before version 7 the retry
// was judged afresh: an applied ack answered FAILED_PRECONDITION or
// NOT_FOUND, and a purge or redrive applied twice. So each queue keeps a
// record of what it settled recently: the lease token an ack or nack
// settled, the idempotency key a purge or redrive named, with its answer.
// A request that finds its own outcome recorded gets that answer again and
// changes nothing; a token settled one way and retried the other way (an
// ack of a nacked lease) is still refused.
//
// The record is replicated state (snapshots from format 6 carry it, the
// digest covers it) and bounded: an entry lapses RecentWindowMs of state
// time after it was recorded, and the oldest goes first when the store
// holds MaxRecent entries. Both bounds are part of the rule, so every
// replica forgets the same entries at the same entry.
const (
	RecentWindowMs = 5 * 60 * 1000
	MaxRecent      = 1 << 18
	// recentEntryBytes is what one entry costs in memory, about: the entry
	// in its queue's tree and its ref in the expiry index (an idempotency
	// key adds its length twice).
	recentEntryBytes = 96
)

// recentVersion is the log version from which acks, nacks, purges and
// redrives record and honour recently settled outcomes.
const recentVersion uint32 = 7

type recentKind = fsmv1.RecentKind

const (
	recentAck     = fsmv1.RecentKind_RECENT_KIND_ACK
	recentNack    = fsmv1.RecentKind_RECENT_KIND_NACK
	recentPurge   = fsmv1.RecentKind_RECENT_KIND_PURGE
	recentRedrive = fsmv1.RecentKind_RECENT_KIND_REDRIVE
)

// recentEntry is one outcome in its queue's tree, ordered by its key
// (kind, message id, token, idempotency key); count and atMs are values.
type recentEntry struct {
	kind      recentKind
	messageID uint64
	token     uint64
	key       string
	count     int64
	atMs      int64
	// acked (an ack's entry from HistoryVersion) is the acked message
	// without its payload, with its story, for GetMessage.
	acked *message
}

func cmpRecentKey(a, b recentEntry) int {
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.messageID, b.messageID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.token, b.token); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

func lessRecentEntry(a, b recentEntry) bool { return cmpRecentKey(a, b) < 0 }

func (e recentEntry) bytes() int64 {
	n := recentEntryBytes + 2*int64(len(e.key))
	if e.acked != nil {
		n += e.acked.size()
	}
	return n
}

// recentRef is an entry in the store's expiry index, oldest first.
type recentRef struct {
	at    int64
	queue string
	entry recentEntry // the key part
}

func lessRecentRef(a, b recentRef) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.queue != b.queue {
		return a.queue < b.queue
	}
	return lessRecentEntry(a.entry, b.entry)
}

// recall reports the recorded outcome of key in q, if any is within the
// window at the state's clock now.
func (q *queue) recall(key recentEntry, now int64) (recentEntry, bool) {
	e, ok := q.recent.Get(key)
	return e, ok && within(e.atMs, now)
}

// remember records an outcome of q at the state's clock, making room by
// forgetting the oldest entry once MaxRecent are held.
func (s *Store) remember(q *queue, e recentEntry) {
	e.atMs = s.lastNow
	if old, ok := q.recent.ReplaceOrInsert(e); ok {
		// Never expected (a key names one outcome), but keep the index
		// and counters exact if it happens.
		s.recentExp.Delete(recentRef{at: old.atMs, queue: q.name, entry: old})
		s.recentBytes -= old.bytes()
	}
	s.recentExp.ReplaceOrInsert(recentRef{at: e.atMs, queue: q.name, entry: e})
	s.recentBytes += e.bytes()
	for s.recentExp.Len() > s.maxRecent {
		s.forgetOldestRecent()
	}
}

// forgetOldestRecent drops the oldest recorded outcome of any queue.
func (s *Store) forgetOldestRecent() {
	r, ok := s.recentExp.DeleteMin()
	if !ok {
		return
	}
	if storeLevel(r.entry.kind) {
		s.forgetDeleted(r)
		return
	}
	if q := s.queues[r.queue]; q != nil {
		if e, ok := q.recent.Delete(r.entry); ok {
			s.recentBytes -= e.bytes()
		}
	}
}

// expireRecent forgets outcomes recorded RecentWindowMs or more ago, at
// most budget of them (negative: all).
func (s *Store) expireRecent(budget int) {
	for n := budget; n != 0; n-- {
		r, ok := s.recentExp.Min()
		if !ok || within(r.at, s.lastNow) {
			return
		}
		s.forgetOldestRecent()
	}
}

// within reports whether an outcome recorded at atMs is still within the
// window at the state's clock now. One past it that the bounded sweep
// (log version 13) has not forgotten yet counts as forgotten, so a retry
// is judged as it would be had the sweep reached it (up to version 11
// the sweep forgets every such outcome before any command looks).
func within(atMs, now int64) bool { return atMs+RecentWindowMs > now }

// dropRecent forgets every outcome of q (the queue is going away).
func (s *Store) dropRecent(q *queue) {
	q.recent.Ascend(func(e recentEntry) bool {
		s.recentExp.Delete(recentRef{at: e.atMs, queue: q.name, entry: e})
		s.recentBytes -= e.bytes()
		return true
	})
	q.recent.Clear(false)
}

// settledKey is the record key of a lease token settled by kind.
func settledKey(kind recentKind, r *fsmv1.Ref) recentEntry {
	return recentEntry{kind: kind, messageID: r.GetMessageId(), token: r.GetLeaseToken()}
}

// settledBefore reports whether the ref's lease was already settled by
// kind, so that a retried request answers OK.
func (tx *Tx) settledBefore(kind recentKind, r *fsmv1.Ref) bool {
	if tx.version < recentVersion || r.GetLeaseToken() == 0 {
		return false
	}
	q := tx.s.queues[r.GetQueue()]
	if q == nil {
		return false
	}
	_, ok := q.recall(settledKey(kind, r), tx.s.lastNow)
	return ok
}

// settle records that kind settled the ref's lease (from log version 7).
func (tx *Tx) settle(q *queue, kind recentKind, r *fsmv1.Ref) {
	if tx.version >= recentVersion {
		tx.s.remember(q, settledKey(kind, r))
	}
}

// settleAck records that an ack settled the ref's lease of m (from log
// version 7), and from HistoryVersion keeps m, acked, without its payload.
func (tx *Tx) settleAck(q *queue, r *fsmv1.Ref, m *message) {
	if tx.version < recentVersion {
		return
	}
	e := settledKey(recentAck, r)
	if tx.s.history {
		acked := *m
		acked.payload = nil
		acked.state = stateReady
		acked.setLease(0, "", 0)
		acked.setStory(m.story().ended(tx.s.lastNow, m, ending{outcome: outcomeAcked, kind: eventAcked}))
		e.acked = &acked
	}
	tx.s.remember(q, e)
}

// idempotent runs op (a purge or a redrive of q) once per idempotency key:
// a repeat within the window answers the first count and changes nothing.
// Without a key, or before log version 7, op runs every time.
func (tx *Tx) idempotent(q *queue, kind recentKind, key string, op func() int64) *CountResult {
	return tx.idempotentErr(q, kind, key, func() (int64, error) { return op(), nil })
}

// idempotentErr is idempotent for an op that may be refused: a refusal
// records nothing, so its retry is judged afresh.
func (tx *Tx) idempotentErr(q *queue, kind recentKind, key string, op func() (int64, error)) *CountResult {
	if tx.version < recentVersion || key == "" {
		n, err := op()
		return &CountResult{Done: Done{Err: err}, Count: n}
	}
	if len(key) > MaxDedupIDLen {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: idempotency_key is longer than %d bytes", ErrInvalid, MaxDedupIDLen)}}
	}
	e := recentEntry{kind: kind, key: key}
	if got, ok := q.recall(e, tx.s.lastNow); ok {
		return &CountResult{Count: got.count}
	}
	n, err := op()
	if err != nil {
		return &CountResult{Done: Done{Err: err}}
	}
	e.count = n
	tx.s.remember(q, e)
	return &CountResult{Count: e.count}
}

// recentRecord is an entry as snapshots carry it.
func (e recentEntry) record(r *fsmv1.RecentEntry) {
	*r = fsmv1.RecentEntry{Kind: e.kind, MessageId: e.messageID, LeaseToken: e.token, IdempotencyKey: e.key, Count: e.count, AtMs: e.atMs}
	if e.acked != nil {
		r.Acked = &fsmv1.MessageRecord{}
		fillMessageRecord(r.Acked, e.acked, nil)
	}
}

// loadRecent adds a snapshot's recorded entry to q.
func (s *Store) loadRecent(q *queue, r *fsmv1.RecentEntry) error {
	switch r.Kind {
	case recentAck, recentNack:
		if r.LeaseToken == 0 || r.IdempotencyKey != "" {
			return fmt.Errorf("%w: recent %v entry of %s without a lease token", ErrInvalid, r.Kind, q.name)
		}
	case recentPurge, recentRedrive:
		if r.IdempotencyKey == "" || r.MessageId != 0 || r.LeaseToken != 0 {
			return fmt.Errorf("%w: recent %v entry of %s without an idempotency key", ErrInvalid, r.Kind, q.name)
		}
	default:
		return fmt.Errorf("%w: recent entry of %s has unknown kind %d", ErrInvalid, q.name, r.Kind)
	}
	e := recentEntry{kind: r.Kind, messageID: r.MessageId, token: r.LeaseToken, key: r.IdempotencyKey, count: r.Count, atMs: r.AtMs}
	if r.Acked != nil {
		if r.Kind != recentAck || s.clusterVersion < HistoryVersion || r.Acked.Id != r.MessageId || len(r.Acked.Payload) > 0 || r.Acked.State != fsmv1.MessageState_MESSAGE_STATE_READY {
			return fmt.Errorf("%w: recent entry of %s keeps an acked message it cannot", ErrInvalid, q.name)
		}
		m, err := messageFromRecord(r.Acked, newBody(r.Acked.Headers, r.Acked.FairnessKey, r.Acked.ThrottleKeys, r.Acked.ConcurrencyKey), s.clusterVersion)
		if err != nil {
			return err
		}
		e.acked = m
	}
	if _, dup := q.recent.ReplaceOrInsert(e); dup {
		return fmt.Errorf("%w: recent entry of %s twice", ErrInvalid, q.name)
	}
	s.recentExp.ReplaceOrInsert(recentRef{at: e.atMs, queue: q.name, entry: e})
	s.recentBytes += e.bytes()
	return nil
}

func newRecentTree() *btree.BTreeG[recentEntry] { return btree.NewG(btreeDegree, lessRecentEntry) }
