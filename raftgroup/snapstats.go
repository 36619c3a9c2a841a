package raftgroup

import (
	"sync"
	"time"
)

// SnapshotStats describes the snapshots this node has written to its data
// dir since it started, for metrics.
type SnapshotStats struct {
	// Count is how many snapshots were written and closed successfully.
	Count uint64
	// LastBytes is the size of the newest one's state file.
	LastBytes int64
	// LastDuration is how long the newest one took from its creation to
	// its final fsync and rename.
	LastDuration time.Duration
	// EntriesSince is how many entries this node has applied past its
	// newest snapshot: what the log holds beyond it. It stays below
	// about SnapshotThreshold plus what arrives in one SnapshotInterval;
	// growing past that, snapshots are failing.
	EntriesSince uint64
	// Failed counts the automatic snapshots that failed (each logged).
	Failed uint64
}

// snapshotCounter records SnapshotStats; the zero value is ready.
type snapshotCounter struct {
	mu sync.Mutex
	st SnapshotStats
}

func (c *snapshotCounter) record(bytes int64, took time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Count++
	c.st.LastBytes, c.st.LastDuration = bytes, took
}

func (c *snapshotCounter) get() SnapshotStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

// SnapshotStats reports the snapshots this node has written since it
// started.
func (g *Group) SnapshotStats() SnapshotStats {
	st := g.snapStats.get()
	if g.snapWatch != nil && !g.quarantined {
		st.EntriesSince = g.snapWatch.entriesSince(g.raft.AppliedIndex())
		st.Failed = g.snapWatch.failed.Load()
	}
	return st
}

// NewestSnapshotBytes is the size of the newest snapshot this node wrote,
// or, before it has written one, of the newest in its data dir when it
// started: about what its next snapshot needs on disk.
func (g *Group) NewestSnapshotBytes() int64 {
	if st := g.snapStats.get(); st.Count > 0 {
		return st.LastBytes
	}
	return g.startSnapBytes
}
