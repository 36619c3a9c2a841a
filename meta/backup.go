package meta

import (
	"errors"
	"fmt"
	"slices"

	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// MaxBackupBytes bounds a meta state read back from a backup: far above
// what the limits let the state reach in practice (a million placements
// of short names, 4,096 write keys, the auth record), and below what
// would exhaust a restoring machine's memory, since the state is read
// whole (as Restore reads a snapshot).
const MaxBackupBytes = 1 << 30

// Backup is the meta state at one applied index in its canonical encoding
// (the snapshot record, deterministic and in key order): its SHA-256 is
// Digest, which every replica computes for the state at Index.
type Backup struct {
	Index          uint64 // the state's applied index
	ClusterVersion uint32
	Seeded         bool
	State          []byte // the State record
}

// Backup copies the state as it is now (small: encoded under the read
// lock, as Snapshot is).
func (f *FSM) Backup() (Backup, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := marshal.Marshal(f.s.record())
	if err != nil {
		return Backup{}, fmt.Errorf("meta: backup: %w", err)
	}
	return Backup{Index: f.s.applied, ClusterVersion: f.s.clusterVersion, Seeded: f.s.seeded, State: b}, nil
}

// ErrBackupMismatch: a meta backup's state is not at the index its
// description names.
var ErrBackupMismatch = errors.New("meta backup does not match its description")

// Refound checks that state (a Backup's State, from a backup file) loads
// as a snapshot of this build would, is seeded and is at index, and
// returns its canonical encoding re-founded for a new cluster of the
// node nodeID alone, the way an offline restore re-founds the data log
// (fsm.RefoundMeta): the legacy data group's replicas become nodeID (its
// epoch +1, as for any replica change), the members other than nodeID
// are dropped (they are another cluster's servers), and so are the other
// data groups, which hold no queue (the pool registers them again on the
// restored cluster's nodes). Identities, tokens,
// grants, settings, placements, the cluster version and the write keys
// are kept. The result is a snapshot record for DATA/meta, from which
// the node serves them at once.
//
// A state with queues placed on a data group besides the legacy one is
// refused: their data is not in the backup, which holds the legacy
// group's.
func Refound(state []byte, index uint64, nodeID string) ([]byte, error) {
	if len(state) > MaxBackupBytes {
		return nil, fmt.Errorf("%w: meta state of %d bytes, more than %d", ErrInvalid, len(state), MaxBackupBytes)
	}
	st := &metav1.State{}
	if err := proto.Unmarshal(state, st); err != nil {
		return nil, fmt.Errorf("%w: meta state: %v", ErrInvalid, err)
	}
	s, err := load(st)
	if err != nil {
		return nil, fmt.Errorf("meta state: %w", err)
	}
	switch {
	case !s.seeded:
		return nil, fmt.Errorf("%w: the meta state was never seeded", ErrInvalid)
	case s.applied != index:
		return nil, fmt.Errorf("%w: the meta state is at index %d; the backup says %d", ErrBackupMismatch, s.applied, index)
	case s.legacyGroup == "":
		return nil, fmt.Errorf("%w: the meta state has no legacy data group", ErrInvalid)
	}
	for _, g := range s.sortedGroups() {
		if g.ID == s.legacyGroup {
			continue
		}
		if n := s.placedOn[g.ID]; n > 0 {
			return nil, fmt.Errorf("%w: %d queues of the meta state are placed on data group %q, whose state is not in the backup (it holds group %q's)",
				ErrInvalid, n, g.ID, s.legacyGroup)
		}
		// An empty group of the pool, on the old cluster's nodes: the
		// restored node's pool duty registers what the settings ask for.
		if r := s.removeGroup(g.ID); r.Err != nil {
			return nil, r.Err
		}
	}
	self, err := replicaSet([]string{nodeID})
	if err != nil {
		return nil, err
	}
	if g := s.groups[s.legacyGroup]; !slices.Equal(g.Replicas, self) {
		n := g.clone()
		n.Replicas, n.Epoch = self, g.Epoch+1
		s.groups[n.ID] = n
	}
	for id := range s.members {
		if id != nodeID {
			delete(s.members, id)
		}
	}
	out, err := marshal.Marshal(s.record())
	if err != nil {
		return nil, fmt.Errorf("meta: refound: %w", err)
	}
	return out, nil
}
