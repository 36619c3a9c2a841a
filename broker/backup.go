package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Backup is a consistent copy of the whole replicated state: the state
// every replica froze when it applied one Checkpoint entry. Because that
// entry went through the log, the copy holds every write acknowledged
// before Operator.Backup was called, and its bytes hash to the digest every
// replica reports for Index (Cluster.Verify's digest).
type Backup struct {
	Index          uint64 // the Checkpoint entry's log index
	Term           uint64 // its Raft term
	ClusterVersion uint32 // the cluster's log version at Index
	NodeID         string // the leader that took it
	Created        time.Time

	fr *state.Frozen
}

// Backup appends a Checkpoint entry and returns the state frozen at it,
// ready to stream. Only the leader proposes; call it where Route says
// Local. Freezing costs O(queues) under the state lock (copy-on-write);
// the copy keeps replaced messages alive until the Backup is dropped.
func (o Operator) Backup(ctx context.Context) (*Backup, error) {
	res, err := apply[*fsm.CheckpointResult](ctx, o.b, &fsmv1.Command{Op: &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}})
	if err != nil {
		return nil, err
	}
	if res.Frozen == nil {
		return nil, errors.New("broker: backup: the checkpoint froze no state")
	}
	return &Backup{
		Index: res.Index, Term: res.Term, ClusterVersion: res.Frozen.ClusterVersion(),
		NodeID: o.b.id, Created: o.b.clock.Now(), fr: res.Frozen,
	}, nil
}

// WriteTo streams the state in the replicated log's snapshot format (what
// a Raft snapshot of this state holds), without holding it in memory.
func (bk *Backup) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 256<<10)
	if err := bk.fr.Canonical(bw); err != nil {
		return cw.n, fmt.Errorf("broker: backup: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("broker: backup: %w", err)
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// RestoreConfig says what a backup is and which node it is restored for.
type RestoreConfig struct {
	// DataDir is the new node's data dir: absent or empty.
	DataDir string
	// NodeID and RaftAdvertise are what the node will be started with
	// (serve's --node-id and advertised Raft address).
	NodeID, RaftAdvertise string
	// Index, Term and ClusterVersion are the backup's (BackupInfo).
	Index, Term    uint64
	ClusterVersion uint32
	// Groups are the node's other groups restored with the data group
	// (the meta group's state, metagroup.PrepareRestore), checked by the
	// caller; written into the same data dir, all or nothing.
	Groups []cluster.GroupState
	Logger *slog.Logger
}

// ErrBackupMismatch: the state in a backup is not what its info says.
var ErrBackupMismatch = errors.New("backup does not match its description")

// Restore writes a data dir from which a node starts as the only voter of
// a new cluster holding the state read from data (a Backup's stream).
// Offline: no node may run on DataDir. The state is loaded as it is
// written, so a backup this build cannot read (corrupt, or from a newer
// raftq: the error says to upgrade first) is refused and leaves nothing
// behind.
func Restore(ctx context.Context, cfg RestoreConfig, data io.Reader) error {
	if cfg.ClusterVersion > fsm.MaxLogVersion {
		return fmt.Errorf("%w: the backup is of a cluster at log version %d, this build applies versions up to %d; restore it with a newer raftq",
			fsm.ErrNewerVersion, cfg.ClusterVersion, fsm.MaxLogVersion)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	validate := func(r io.Reader) error {
		var fatal error
		f := fsm.New(fsm.Options{Logger: cfg.Logger, Fatal: func(err error) { fatal = err }})
		if err := f.Restore(io.NopCloser(r)); err != nil {
			return err
		}
		if fatal != nil {
			return fatal
		}
		if f.Reader().AppliedIndex() != cfg.Index || f.Reader().ClusterVersion() != cfg.ClusterVersion {
			return fmt.Errorf("%w: the state is at index %d, cluster version %d; the backup says index %d, cluster version %d",
				ErrBackupMismatch, f.Reader().AppliedIndex(), f.Reader().ClusterVersion(), cfg.Index, cfg.ClusterVersion)
		}
		return nil
	}
	// The restored cluster is this node alone: it founds the meta group
	// too (the backup's founders are another cluster's servers).
	data, err := fsm.RefoundMeta(data, []fsm.MetaServer{{ID: cfg.NodeID, Address: cfg.RaftAdvertise}})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return cluster.RestoreSnapshot(ctx, cluster.RestoreConfig{
		DataDir: cfg.DataDir, NodeID: cfg.NodeID, RaftAdvertise: cfg.RaftAdvertise,
		Index: cfg.Index, Term: cfg.Term, Groups: cfg.Groups,
	}, data, validate)
}
