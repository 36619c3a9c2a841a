package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/state"
)

type fsmSnapshot struct{ fr *state.Frozen }

// Snapshot implements raft.FSM. It only freezes (O(queues), copy-on-write);
// the writing happens in Persist, concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{fr: f.store.Freeze(f.store.AppliedIndex())}, nil
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	bw := bufio.NewWriterSize(sink, 1<<20)
	if err := s.fr.Stream(bw); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// Restore implements raft.FSM: it replaces the whole state with the
// snapshot's and rebuilds every index. A malformed snapshot leaves the
// previous state in place; one of a newer version stops the node (as a
// newer entry does).
func (f *FSM) Restore(rc io.ReadCloser) error { return f.RestoreCounting(rc, nil) }

// RestoreCounting is Restore adding each message it has restored to
// messages (which may be nil), so that the caller can report on a long
// restore as it goes. Like Restore, it reads rc to the end and keeps the
// previous state if any read fails, the last one included (a reader that
// checks a checksum as it goes reports a mismatch there).
func (f *FSM) RestoreCounting(rc io.ReadCloser, messages *atomic.Int64) error {
	defer rc.Close()
	st, err := state.LoadReporting(bufio.NewReaderSize(rc, 1<<20), messages)
	if err == nil && st.ClusterVersion() > MaxLogVersion {
		err = fmt.Errorf("%w: snapshot of a cluster at log version %d, this build applies versions up to %d; upgrade this node's raftq binary",
			ErrNewerVersion, st.ClusterVersion(), MaxLogVersion)
	}
	if err != nil {
		err = fmt.Errorf("restore snapshot: %w", err)
		if errors.Is(err, ErrNewerVersion) {
			// Never guess at a newer state: stop, as for a newer entry.
			f.mu.Lock()
			f.halted = fmt.Errorf("%w: %w", err, ErrHalted)
			fatal := f.fatal
			f.mu.Unlock()
			fatal(err)
		}
		return err
	}
	f.mu.Lock()
	f.store = st
	// The restored state is the state at its index on every replica, so
	// this one can report the digest there as if it had applied a
	// Checkpoint entry at it: a node restored from a backup answers for
	// the backup's index (LocalDigest).
	f.checkpoints = checkpoints{}
	f.auth.Store(st.Auth())
	f.checkpoints.add(st.AppliedIndex(), st.Freeze(st.AppliedIndex()))
	names := st.View().QueueNames()
	n := f.notifier
	f.mu.Unlock()
	if n != nil {
		n.QueuesChanged(names)
	}
	return nil
}
