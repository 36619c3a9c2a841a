package state

import (
	"errors"

	"github.com/raftq/raftq/acl"
)

// Sentinel errors carried in results. The transport maps them to gRPC codes
// with errors.Is; details are added by wrapping.
var (
	// ErrInvalid marks bad input (names, sizes, ranges).
	ErrInvalid = acl.ErrInvalid // errors.New("invalid argument"), shared with package acl
	// ErrQueueNotFound: the named queue does not exist.
	ErrQueueNotFound = errors.New("queue not found")
	// ErrQueueExists: CreateQueue of a queue that is already there.
	ErrQueueExists = errors.New("queue already exists")
	// ErrMessageNotFound: no message with that id in the queue.
	ErrMessageNotFound = errors.New("message not found")
	// ErrStaleLease: the message exists but is not leased under that token.
	ErrStaleLease = errors.New("stale or unknown lease token")
	// ErrQueueFull: admission refused by max_depth or max_bytes.
	ErrQueueFull = errors.New("queue full")
	// ErrInUse: the queue cannot be deleted or changed while others depend on it.
	ErrInUse = errors.New("queue in use")
	// ErrNotEmpty: a conditional delete (if_empty) of a queue that holds
	// messages.
	ErrNotEmpty = errors.New("queue not empty")
	// ErrLimit: a count limit of the state (tokens, grants) is reached.
	ErrLimit = acl.ErrLimit // errors.New("limit reached"), shared with package acl
	// ErrPaused: a grant of a message of a paused queue or fairness key
	// (PauseVersion).
	ErrPaused = errors.New("queue or fairness key paused")
)

// ErrNewerVersion marks an entry or snapshot written under a log or
// snapshot format version newer than this build understands: it must not
// be applied (that would guess at rules this build does not know).
var ErrNewerVersion = errors.New("written by a newer raftq version")
