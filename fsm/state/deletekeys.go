package state

import (
	"cmp"
	"fmt"

	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Keyed deletes (log version 11). A DeleteQueue whose answer was lost is
// retried by the SDK and the CLI; judged afresh, a retry that arrives after
// someone created the queue again deletes the new queue and every message
// acknowledged into it. So a delete may carry an idempotency key, and a
// delete that succeeded is remembered by (queue name, key): a repeat
// answers OK, as the first did, and deletes nothing.
//
// The record cannot live in the queue's own recent outcomes (recent.go),
// which go with the queue, so it is kept in the store, apart from every
// queue: it survives the queue being created again. Otherwise it is a
// recent outcome like the others, bounded by the same rules so every
// replica forgets the same entries at the same entry: it sits in the same
// expiry index (kind RECENT_KIND_DELETE_QUEUE), lapses RecentWindowMs
// after it was made, counts in MaxRecent and in the recent bytes that
// admission counts. Snapshots from format 7 carry it after the
// AuthRecord; the digest covers it.

const recentDeleteQueue = fsmv1.RecentKind_RECENT_KIND_DELETE_QUEUE

// deletedKey is a delete that succeeded with an idempotency key, or (from
// WriteKeyVersion, writekeys.go) another keyed write of its kind, whose
// target is then in queue. Ordered by (kind, queue, key): a delete's kind
// is the lowest, so a state holding deletes only keeps version 11's order;
// atMs is a value.
type deletedKey struct {
	kind  recentKind
	queue string
	key   string
	atMs  int64
}

func lessDeletedKey(a, b deletedKey) bool {
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(a.queue, b.queue); c != 0 {
		return c < 0
	}
	return a.key < b.key
}

func newDeletedTree() *btree.BTreeG[deletedKey] { return btree.NewG(btreeDegree, lessDeletedKey) }

// bytes is what the record costs, about: as a recent outcome, plus the
// queue name it keeps.
func (d deletedKey) bytes() int64 {
	return recentEntryBytes + 2*int64(len(d.key)) + int64(len(d.queue))
}

// ref is the record's entry in the recent outcomes' expiry index.
func (d deletedKey) ref() recentRef {
	return recentRef{at: d.atMs, queue: d.queue, entry: recentEntry{kind: d.kind, key: d.key, atMs: d.atMs}}
}

// deleteKeyed reports whether a DeleteQueue of this entry is keyed, and
// refuses a key that is too long (before anything is looked at).
func (tx *Tx) deleteKeyed(c *fsmv1.DeleteQueue) (bool, error) {
	key := c.GetIdempotencyKey()
	if tx.version < DeleteKeyVersion || key == "" {
		return false, nil
	}
	if len(key) > MaxDedupIDLen {
		return false, fmt.Errorf("%w: idempotency_key is longer than %d bytes", ErrInvalid, MaxDedupIDLen)
	}
	return true, nil
}

// deletedBefore reports whether a delete of queue with key succeeded within
// the window.
func (s *Store) deletedBefore(queue, key string) bool {
	return s.wroteBefore(recentDeleteQueue, queue, key)
}

// wroteBefore reports whether a write of kind on target with key
// succeeded within the window.
func (s *Store) wroteBefore(kind recentKind, target, key string) bool {
	d, ok := s.deleted.Get(deletedKey{kind: kind, queue: target, key: key})
	return ok && within(d.atMs, s.lastNow)
}

// rememberDelete records that the delete of queue with key succeeded, at
// the state's clock, making room as remember does.
func (s *Store) rememberDelete(queue, key string) { s.rememberWrite(recentDeleteQueue, queue, key) }

// rememberWrite records that a write of kind on target with key
// succeeded, at the state's clock, making room as remember does.
func (s *Store) rememberWrite(kind recentKind, target, key string) {
	d := deletedKey{kind: kind, queue: target, key: key, atMs: s.lastNow}
	if old, ok := s.deleted.ReplaceOrInsert(d); ok {
		// Never expected (a repeat is answered, not recorded), but keep
		// the index and counters exact if it happens.
		s.recentExp.Delete(old.ref())
		s.recentBytes -= old.bytes()
	}
	s.recentExp.ReplaceOrInsert(d.ref())
	s.recentBytes += d.bytes()
	for s.recentExp.Len() > s.maxRecent {
		s.forgetOldestRecent()
	}
}

// forgetDeleted drops the record an expiry-index ref names.
func (s *Store) forgetDeleted(r recentRef) {
	if d, ok := s.deleted.Delete(deletedKey{kind: r.entry.kind, queue: r.queue, key: r.entry.key}); ok {
		s.recentBytes -= d.bytes()
	}
}

// loadDeleted adds a snapshot's record.
func (s *Store) loadDeleted(r *fsmv1.DeletedKey, clusterVersion uint32) error {
	kind := r.GetKind()
	if kind == fsmv1.RecentKind_RECENT_KIND_UNSPECIFIED {
		kind = recentDeleteQueue
	}
	if kind != recentDeleteQueue && clusterVersion < WriteKeyVersion {
		return fmt.Errorf("%w: a keyed write of kind %v at cluster version %d", ErrInvalid, kind, clusterVersion)
	}
	if err := validateWriteTarget(kind, r.Queue); err != nil {
		return fmt.Errorf("%w: deleted key: %w", ErrInvalid, err)
	}
	if r.IdempotencyKey == "" || len(r.IdempotencyKey) > MaxDedupIDLen {
		return fmt.Errorf("%w: deleted key of %s is empty or longer than %d bytes", ErrInvalid, r.Queue, MaxDedupIDLen)
	}
	d := deletedKey{kind: kind, queue: r.Queue, key: r.IdempotencyKey, atMs: r.AtMs}
	if _, dup := s.deleted.ReplaceOrInsert(d); dup {
		return fmt.Errorf("%w: deleted key of %s twice", ErrInvalid, r.Queue)
	}
	s.recentExp.ReplaceOrInsert(d.ref())
	s.recentBytes += d.bytes()
	return nil
}

// verifyDeleted checks that every record is in the expiry index and
// returns how many there are and what they cost.
func (s *Store) verifyDeleted() (int, int64, error) {
	var bytes int64
	var err error
	s.deleted.Ascend(func(d deletedKey) bool {
		bytes += d.bytes()
		if !s.recentExp.Has(d.ref()) {
			err = fmt.Errorf("deleted key of %s missing from the recent expiry index", d.queue)
		}
		return err == nil
	})
	return s.deleted.Len(), bytes, err
}
