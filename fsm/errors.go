package fsm

import (
	"errors"

	"github.com/raftq/raftq/fsm/state"
)

// Sentinel errors carried in results (defined by the state store, where
// the rules that return them live). The transport maps them to gRPC codes
// with errors.Is; details are added by wrapping.
var (
	ErrInvalid         = state.ErrInvalid
	ErrQueueNotFound   = state.ErrQueueNotFound
	ErrQueueExists     = state.ErrQueueExists
	ErrMessageNotFound = state.ErrMessageNotFound
	ErrStaleLease      = state.ErrStaleLease
	ErrQueueFull       = state.ErrQueueFull
	ErrInUse           = state.ErrInUse
	ErrNotEmpty        = state.ErrNotEmpty
	ErrLimit           = state.ErrLimit
	ErrPaused          = state.ErrPaused
	ErrTokenExists     = state.ErrTokenExists
	ErrTokenNotFound   = state.ErrTokenNotFound
	ErrGrantNotFound   = state.ErrGrantNotFound
	ErrAnswerLost      = state.ErrAnswerLost
	ErrMoved           = state.ErrMoved

	// ErrNewerVersion marks an entry or snapshot written under a log
	// version newer than MaxLogVersion: this node must not apply it and
	// stops instead (Options.Fatal).
	ErrNewerVersion = state.ErrNewerVersion
)

// ErrHalted is every result after the FSM met a newer version: nothing
// more is applied, so this replica's state stays a true prefix of the log.
var ErrHalted = errors.New("state machine halted")

// ErrNoCheckpoint: no checkpoint at that index (not applied yet, or aged out).
var ErrNoCheckpoint = errors.New("no checkpoint at that index")
