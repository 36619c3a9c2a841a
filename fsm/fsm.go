package fsm

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// MaxLogVersion is the newest log version this build understands: it
// applies entries of versions 1..MaxLogVersion by each entry's own rules
// and stops (Options.Fatal) at a newer one. Version 1 is the format
// before versioning (entries carry no version); version 2 adds only the
// SetClusterVersion command; version 3 makes fairness keys' order and
// weights replicated state; version 4 moves the clock by elapsed time
// within each leader's term; version 5 adds identities, tokens and
// grants; version 6 adds DeleteQueue.if_empty; version 7 answers retries as the first call;
// version 8 adds RecountQueues; version 9 enforces admission at apply;
// version 10 lets an Ack carry lease grants; version 11 answers a
// retried keyed DeleteQueue as the first; version 12 bounds the
// time-driven sweep per entry. fsm/DESIGN.md lists every
// version.
const MaxLogVersion = state.MaxLogVersion

// Notifier learns which queues an applied batch touched (new ready work,
// leases ended, config changed). It is called after the state lock is
// released and must not block: the scheduler coalesces the signal.
type Notifier interface {
	QueuesChanged(queues []string)
}

// Options configure a new FSM. The zero value is usable.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Notifier, if set, learns which queues each applied batch touched.
	// It is fixed at construction: the composition root passes a fan-out
	// that reaches the scheduler while it leads.
	Notifier Notifier
	// Fatal stops the node when the FSM meets an entry or snapshot of a
	// log version newer than MaxLogVersion. It is called without locks
	// held. The default panics with the error's message; a composition
	// root may log and exit instead. The FSM stops applying either way.
	Fatal func(error)
	// Proposals, if set, is where this node's proposer records the
	// commands it proposes, so the leader need not decode its own entries.
	Proposals *Proposals
}

// FSM is the replicated state machine hashicorp/raft drives: it decodes
// each entry, checks its log version, has the state store apply it and
// returns the store's typed result. It implements raft.FSM and
// raft.BatchingFSM. Reads take the read lock; Apply takes the write lock.
type FSM struct {
	log       *slog.Logger
	notifier  Notifier
	fatal     func(error)
	proposals *Proposals

	mu          sync.RWMutex
	store       *state.Store
	checkpoints checkpoints
	halted      error // set once a newer version was met; nothing applies after

	// auth is the store's current (immutable) auth state, published after
	// each batch so every RPC's permission check reads it without a lock.
	auth atomic.Pointer[state.Auth]
	// repairs counts counter repairs per queue on this node (recount.go);
	// for metrics, not state.
	repairs map[string]uint64
}

// New returns an empty state machine.
func New(opts Options) *FSM {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Fatal == nil {
		opts.Fatal = func(err error) { panic(err.Error()) }
	}
	f := &FSM{log: opts.Logger, notifier: opts.Notifier, fatal: opts.Fatal, proposals: opts.Proposals, store: state.New()}
	f.auth.Store(f.store.Auth())
	return f
}

// Encode serialises a command for raft.Apply.
func Encode(cmd *fsmv1.Command) ([]byte, error) {
	return proto.Marshal(cmd)
}

// Decode parses a log entry's data.
func Decode(data []byte) (*fsmv1.Command, error) {
	cmd := &fsmv1.Command{}
	if err := proto.Unmarshal(data, cmd); err != nil {
		return nil, fmt.Errorf("%w: decode command: %v", ErrInvalid, err)
	}
	return cmd, nil
}

// command returns the entry's command: the one its proposer recorded (see
// Proposals), if this node proposed it, otherwise decoded.
func (f *FSM) command(data []byte) (*fsmv1.Command, error) {
	if cmd, ok := f.proposals.take(data); ok {
		return cmd, nil
	}
	return Decode(data)
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: one lock acquisition and one
// notification for many entries. Each entry is applied by the rules of the
// log version it was proposed under; an entry newer than MaxLogVersion
// halts the FSM (see Options.Fatal) before anything of it is applied.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	touched := state.NewTouched()
	var halt error
	f.mu.Lock()
	for i, l := range logs {
		if f.halted != nil {
			out[i] = failed(f.halted)
			continue
		}
		if l.Type == raft.LogCommand {
			cmd, err := f.command(l.Data)
			switch {
			case err != nil:
				out[i] = failed(err)
			case entryVersion(cmd) > MaxLogVersion:
				f.halted = fmt.Errorf("%w: raft log entry %d is log version %d, this build applies versions up to %d; "+
					"upgrade this node's raftq binary (the node stops so it never guesses at rules it does not know): %w",
					ErrNewerVersion, l.Index, entryVersion(cmd), MaxLogVersion, ErrHalted)
				halt = f.halted
				out[i] = failed(f.halted)
				continue
			default:
				out[i] = f.apply(l.Index, l.Term, cmd, touched)
			}
		}
		f.store.SetApplied(l.Index)
	}
	f.checkpoints.dropOld(f.store.AppliedIndex())
	f.auth.Store(f.store.Auth())
	n := f.notifier
	fatal := f.fatal
	f.mu.Unlock()
	if n != nil && len(touched.List()) > 0 {
		n.QueuesChanged(touched.List())
	}
	if halt != nil {
		fatal(halt)
	}
	return out
}

// entryVersion is the log version an entry was proposed under: entries
// written before versioning carry none, which means 1.
func entryVersion(cmd *fsmv1.Command) uint32 {
	return max(cmd.GetVersion(), 1)
}

// ApplyCommand applies one command at a given index without Raft; tests and
// tools use it to drive the FSM directly.
func (f *FSM) ApplyCommand(index uint64, cmd *fsmv1.Command) Result {
	data, err := Encode(cmd)
	if err != nil {
		return failed(err)
	}
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(Result)
}
