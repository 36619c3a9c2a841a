package meta

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/acl"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// Options configure an FSM.
type Options struct {
	Logger *slog.Logger
	// Fatal is called once when an entry or snapshot of a newer meta log
	// version arrives; the FSM applies nothing after it. Default: panic.
	Fatal func(msg string)
}

// FSM is the meta group's raft.FSM. Reads take the read lock; the values
// they return are copies (or immutable, as the acl.Auth).
type FSM struct {
	log   *slog.Logger
	fatal func(string)

	mu     sync.RWMutex
	s      *state
	halted bool
	// changed is closed (and replaced) after every applied entry and
	// restore, under mu: the wake-up of whatever follows meta's state.
	changed chan struct{}
	// seededAuth is the auth state once seeded (nil before), published
	// with each change for readers on every call's path (SeededAuth).
	seededAuth atomic.Pointer[acl.Auth]
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM with the state before the seed.
func New(opts Options) *FSM {
	f := &FSM{log: opts.Logger, fatal: opts.Fatal, s: newState(), changed: make(chan struct{})}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.fatal == nil {
		f.fatal = func(msg string) { panic(msg) }
	}
	return f
}

// Encode is the bytes of a command, stamped with version (0: MaxLogVersion)
// and the proposing leader's nowMs. The command itself is not changed.
func Encode(c *metav1.Command, version uint32, nowMs int64) ([]byte, error) {
	if version == 0 {
		version = MaxLogVersion
	}
	e := proto.Clone(c).(*metav1.Command)
	e.Version, e.NowMs = version, nowMs
	b, err := proto.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("meta: encode: %w", err)
	}
	return b, nil
}

// Decode reads one entry's command. An entry without a version, or of a
// version newer than this build, is an error (ErrInvalid, ErrNewerVersion).
func Decode(b []byte) (*metav1.Command, error) {
	c := &metav1.Command{}
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%w: meta entry: %v", ErrInvalid, err)
	}
	switch {
	case c.GetVersion() == 0:
		return nil, fmt.Errorf("%w: meta entry without a log version", ErrInvalid)
	case c.GetVersion() > MaxLogVersion:
		return c, fmt.Errorf("%w: meta entry of log version %d, this build applies up to %d", ErrNewerVersion, c.GetVersion(), MaxLogVersion)
	}
	return c, nil
}

// Apply applies one committed entry and returns its *Result.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return &Result{}
	}
	c, err := Decode(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notifyLocked()
	switch {
	case f.halted:
		return failed(ErrHalted)
	case err != nil && c != nil:
		// A newer version: never guessed at.
		f.halted = true
		msg := fmt.Sprintf("meta: entry %d: %v; upgrade this node's raftq binary", l.Index, err)
		f.log.Error(msg)
		f.fatal(msg)
		return failed(ErrHalted)
	case err != nil:
		f.s.applied = l.Index
		return failed(err)
	}
	return f.s.apply(c, l.Index)
}

// Snapshot freezes the state's record (small: members, groups,
// placements, auth) under the lock; Persist writes it.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := marshal.Marshal(f.s.record())
	if err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	return snapshot(b), nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("meta: persist: %w", err)
	}
	return sink.Close()
}

func (snapshot) Release() {}

// Restore replaces the state with a snapshot's, checked whole first.
func (f *FSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("meta: restore: %w", err)
	}
	st := &metav1.State{}
	if err := proto.Unmarshal(b, st); err != nil {
		return fmt.Errorf("%w: meta snapshot: %v", ErrInvalid, err)
	}
	s, err := load(st)
	if err != nil {
		return fmt.Errorf("meta: restore: %w", err)
	}
	f.mu.Lock()
	f.s = s
	f.notifyLocked()
	f.mu.Unlock()
	return nil
}

// notifyLocked wakes every Changed waiter and publishes the auth state;
// f.mu is held for writing.
func (f *FSM) notifyLocked() {
	if f.s.seeded {
		f.seededAuth.Store(f.s.auth)
	} else {
		f.seededAuth.Store(nil)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// SeededAuth is the identities, tokens and grants once the seed has
// applied, nil before; it takes no lock (the authenticator reads it on
// every call).
func (f *FSM) SeededAuth() *acl.Auth { return f.seededAuth.Load() }

// Await waits until cond holds of the state (read after each applied
// entry or restore) or ctx ends; it reports whether cond held. cond must
// read the FSM only through its methods.
func (f *FSM) Await(ctx context.Context, cond func() bool) bool {
	for {
		changed := f.Changed() // before the check: no change is missed
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// Changed is closed at the next applied entry or restore: read the state
// again then.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// Digest is the SHA-256 of the state's snapshot record: replicas at the
// same index have equal digests.
func (f *FSM) Digest() [32]byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.digest()
}
