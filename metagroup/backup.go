package metagroup

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/raftq/raftq/meta"
)

// Backup is meta's state at a consistent point, as its leader took it.
type Backup struct {
	meta.Backup
	Term    uint64 // the term of the entry at Index (raftgroup.Group.TermAt)
	NodeID  string // the leader that took it
	Created time.Time
	// SHA256 is that of State: the digest (meta.FSM.Digest) every replica
	// computes for the state at Index.
	SHA256 [32]byte
}

// Backup returns meta's state holding every write committed before it was
// called. This node must lead meta (raftgroup.ErrNotLeader otherwise): its
// Barrier applies every entry committed before it, so the copy taken
// after it misses no acknowledged write, whichever leader took it. Meta
// has no checkpoint entry of its own (one would be a new meta log
// command): the state's applied index names the point instead, which is
// the same on every replica because only commands move it. Before the
// seed it answers ErrStarting.
func (g *Group) Backup(ctx context.Context) (*Backup, error) {
	if err := g.g.Barrier(ctx); err != nil {
		return nil, fmt.Errorf("meta backup: %w", err)
	}
	bk, err := g.fsm.Backup()
	if err != nil {
		return nil, err
	}
	if !bk.Seeded {
		return nil, fmt.Errorf("meta backup: %w", ErrStarting)
	}
	term, err := g.g.TermAt(bk.Index)
	if err != nil {
		return nil, fmt.Errorf("meta backup: %w", err)
	}
	return &Backup{Backup: bk, Term: term, NodeID: g.cfg.NodeID, Created: g.cfg.Now(), SHA256: sha256.Sum256(bk.State)}, nil
}

// Restored is the meta group's state as an offline restore writes it into
// a new data dir: a Raft snapshot at Index in Dir (relative to the data
// dir, where Open finds it), with the restoring node as meta's only
// voter, so a node started there restores it before anything else and
// serves its identities, tokens, grants and settings at once, seeded.
type Restored struct {
	Dir            string
	Index          uint64
	WALSegmentSize int
	State          []byte
}

// PrepareRestore checks a meta backup's state (at index) and re-founds it
// for a new cluster of nodeID alone (meta.Refound). Nothing is written:
// the caller writes the result with the data group's state, all or
// nothing (cluster.RestoreConfig.Groups).
func PrepareRestore(state []byte, index uint64, nodeID string) (Restored, error) {
	st, err := meta.Refound(state, index, nodeID)
	if err != nil {
		return Restored{}, err
	}
	return Restored{Dir: meta.MetaGroupID, Index: index, WALSegmentSize: metaSegmentSize, State: st}, nil
}
