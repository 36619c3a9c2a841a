package meta

import (
	"errors"

	"github.com/raftq/raftq/acl"
)

// Sentinel errors carried in results; an edge maps them to gRPC codes with
// errors.Is. ErrInvalid and ErrLimit are acl's (and so fsm/state's) values.
var (
	// ErrInvalid marks bad input (names, sizes, ranges, versions).
	ErrInvalid = acl.ErrInvalid
	// ErrLimit: a count limit of the state is reached.
	ErrLimit = acl.ErrLimit
	// ErrNotSeeded: a command other than Seed before the seed applied.
	ErrNotSeeded = errors.New("meta group not seeded")
	// ErrConflict: the command contradicts what the state holds (a queue
	// placed elsewhere, a group registered with other replicas, a stale
	// epoch, a second different seed).
	ErrConflict = errors.New("conflicts with the meta state")
	// ErrNotFound: the named group or member does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInUse: a group that queues are placed on, a member that is a
	// group's replica.
	ErrInUse = errors.New("in use")
	// ErrAnswerLost: a keyed CreateToken repeated after the first
	// succeeded; its secret was only in the lost answer.
	ErrAnswerLost = errors.New("answer lost")
	// ErrHalted: the FSM met an entry of a newer meta log version and
	// applies nothing more.
	ErrHalted = errors.New("meta state machine halted")
	// ErrNewerVersion marks an entry or snapshot of a newer version than
	// this build applies.
	ErrNewerVersion = errors.New("written by a newer raftq version")
)
