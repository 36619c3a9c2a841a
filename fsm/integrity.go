package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/state"
)

// Integrity is how this replica's state is checked: whole (Verify: every
// counter and index recomputed; the counter audit's copies and the byte
// total's drift, and the repairs RecountQueues made) and the same as the
// other replicas' (Digest, and DigestAt a Checkpoint entry's index, which
// the replica check and Cluster.Verify compare). A part of FSM
// (FSM.Integrity) apart from the raft hooks and the queries, so each type
// has one job; a value holding the FSM, cheap to copy and to keep.
type Integrity struct{ f *FSM }

// Integrity returns the state machine's checks.
func (f *FSM) Integrity() Integrity { return Integrity{f: f} }

// Verify recomputes every counter and index from the message trees and
// reports the first disagreement. Tests call it after every step; operators
// reach it through Cluster.Verify.
func (c Integrity) Verify() error {
	c.f.mu.RLock()
	defer c.f.mu.RUnlock()
	return c.f.store.Verify()
}

// Digest returns the applied index and a hash of the whole state at it.
func (c Integrity) Digest() (uint64, string, error) {
	c.f.mu.Lock()
	fr := c.f.store.Freeze(c.f.store.AppliedIndex())
	c.f.mu.Unlock()
	d, err := fr.Digest()
	return fr.Index(), d, err
}

// DigestAt returns the digest of the state frozen by the Checkpoint
// command at index.
func (c Integrity) DigestAt(index uint64) (string, error) {
	c.f.mu.RLock()
	cp := c.f.checkpoints.find(index)
	var (
		fr     *state.Frozen
		digest string
	)
	if cp != nil {
		fr, digest = cp.fr, cp.digest
	}
	c.f.mu.RUnlock()
	if cp == nil {
		return "", fmt.Errorf("%w: %d", ErrNoCheckpoint, index)
	}
	if digest != "" {
		return digest, nil
	}
	d, err := fr.Digest()
	if err != nil {
		return "", err
	}
	c.f.mu.Lock()
	cp.digest, cp.fr = d, nil
	c.f.mu.Unlock()
	return d, nil
}
