package state

import (
	"errors"
	"fmt"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Keyed writes (WriteKeyVersion). The SDK and the CLI retry every write
// whose answer was lost, and the writes below, judged afresh, are not safe
// to repeat once someone else changed the same thing in between: a retried
// UpdateQueue sets back fields another update changed, a retried Grant
// gives back what an Ungrant took (and the reverse), a retried RevokeToken
// revokes a token created again under the name, a retried
// SetClusterSettings undoes another operator's setting, a retried
// CreateQueue creates again a queue deleted in between, and a retried
// CreateToken makes a second token after a revoke. So each may carry an
// idempotency key, and a write that succeeded with one is remembered by
// (kind, target, key), exactly as a keyed DeleteQueue is (deletekeys.go):
// outside any queue, in the same expiry index and bounds, in the snapshot
// and the digest. A repeat changes nothing and answers as below
// (keyedRepeat). The target is the queue, the token's name, the identity,
// or "" for the cluster settings: a key repeated on another target is a
// new write.

// WriteKeyVersion is the log version from which the idempotency_key of
// CreateQueue, UpdateQueue, CreateToken, RevokeToken, AuthGrant,
// AuthUngrant and SetClusterSettings is honoured; earlier entries ignore
// it, and the proposer refuses a key before the cluster reaches it.
const WriteKeyVersion uint32 = 15

const (
	recentCreateQueue = fsmv1.RecentKind_RECENT_KIND_CREATE_QUEUE
	recentUpdateQueue = fsmv1.RecentKind_RECENT_KIND_UPDATE_QUEUE
	recentCreateToken = fsmv1.RecentKind_RECENT_KIND_CREATE_TOKEN
	recentRevokeToken = fsmv1.RecentKind_RECENT_KIND_REVOKE_TOKEN
	recentGrant       = fsmv1.RecentKind_RECENT_KIND_GRANT
	recentUngrant     = fsmv1.RecentKind_RECENT_KIND_UNGRANT
	recentSettings    = fsmv1.RecentKind_RECENT_KIND_SET_CLUSTER_SETTINGS
)

// ErrAnswerLost: a keyed CreateToken repeated after the first succeeded.
// The token exists, but its secret was only in the lost answer and is
// never stored, so the repeat cannot show it and creates nothing.
var ErrAnswerLost = errors.New("answer lost")

// storeLevel reports whether outcomes of kind are kept in the store's
// keyed-write records rather than in a queue's recent entries.
func storeLevel(kind recentKind) bool {
	return kind == recentDeleteQueue || kind >= recentCreateQueue && kind <= recentSettings
}

// validateWriteTarget checks a keyed record's target for its kind.
func validateWriteTarget(kind recentKind, target string) error {
	switch kind {
	case recentDeleteQueue, recentCreateQueue, recentUpdateQueue:
		return ValidateQueueName(target)
	case recentCreateToken, recentRevokeToken, recentGrant, recentUngrant:
		return ValidateIdentity(target)
	case recentSettings:
		if target != "" {
			return fmt.Errorf("%w: a cluster settings record names %q", ErrInvalid, target)
		}
		return nil
	}
	return fmt.Errorf("%w: keyed record of kind %v", ErrInvalid, kind)
}

// keyedWrite is one write's key as its entry carries it.
type keyedWrite struct {
	kind   recentKind
	target string
	key    string // "" when not keyed at this entry's version
}

// writeKey reads a write's key: none below WriteKeyVersion (the field is
// ignored there, as older builds ignore it) or when empty; a key that is
// too long is refused before anything is looked at.
func (tx *Tx) writeKey(kind recentKind, target, key string) (keyedWrite, error) {
	if tx.version < WriteKeyVersion || key == "" {
		return keyedWrite{}, nil
	}
	if len(key) > MaxDedupIDLen {
		return keyedWrite{}, fmt.Errorf("%w: idempotency_key is longer than %d bytes", ErrInvalid, MaxDedupIDLen)
	}
	return keyedWrite{kind: kind, target: target, key: key}, nil
}

// repeat reports whether this keyed write already succeeded.
func (tx *Tx) repeat(k keyedWrite) bool {
	return k.key != "" && tx.s.wroteBefore(k.kind, k.target, k.key)
}

// done records a keyed write that succeeded (nothing when not keyed).
func (tx *Tx) done(k keyedWrite) {
	if k.key != "" {
		tx.s.rememberWrite(k.kind, k.target, k.key)
	}
}

// repeatedQueue is the answer to a repeat of a keyed CreateQueue or
// UpdateQueue: OK, as the first attempt answered, with the queue as it is
// now; a queue deleted since is answered with its name alone (a repeat
// creates and changes nothing either way, as if the first answer had
// arrived before the delete).
func (tx *Tx) repeatedQueue(name string) *QueueResult {
	q := tx.s.queues[name]
	if q == nil {
		return &QueueResult{Queue: &QueueInfo{Name: name, Config: &fsmv1.QueueConfig{}}}
	}
	return &QueueResult{Queue: tx.s.info(q)}
}
