package raftgroup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftlog"
)

// corruptMarker in a data dir records that the node found its Raft state
// corrupt: every later start stays out of Raft until the state is wiped
// for repair (the marker is set aside with it), even when the damage is
// no longer visible (a read error that passed, a file overwritten).
const corruptMarker = "raft-corrupt"

// writeCorruptMarker records c in dataDir, durably.
func writeCorruptMarker(dataDir string, c *raftlog.Corruption) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return raftlog.WriteRecord(dataDir, corruptMarker, string(b)+"\n")
}

// RecordedCorruption returns the corruption a group's dir records (a
// group that found its state corrupt quarantines at every start until
// the state is wiped), nil if none.
func RecordedCorruption(dataDir string) (*raftlog.Corruption, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, corruptMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c := &raftlog.Corruption{Offset: -1}
	if err := json.Unmarshal(b, c); err != nil || c.Reason == "" {
		// The marker itself is damaged: what it says is lost, not that
		// the state is corrupt.
		c = &raftlog.Corruption{File: filepath.Join(dataDir, corruptMarker), Offset: -1, Reason: "recorded as corrupt (the record is unreadable)"}
	}
	return c, nil
}

// verifySnapshots checks every complete snapshot in dir (the data dir's
// snapshots/): its meta.json parses, and its state file has the size and
// CRC-64 the metadata records. raft's FileSnapshotStore skips a snapshot
// whose metadata it cannot read, so that a damaged meta.json would
// otherwise start the node from an older snapshot, or none, silently.
// With state, the newest snapshot's state file is checked too (the one a
// start restores and a leader sends); without, only the metadata.
func verifySnapshots(dir string, state bool) *raftlog.Corruption {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &raftlog.Corruption{File: dir, Offset: -1, Reason: err.Error(), Err: err, At: time.Now()}
	}
	type snap struct {
		dir   string
		index uint64
		term  uint64
		size  int64
		crc   []byte
	}
	var snaps []snap
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		d := filepath.Join(dir, e.Name())
		metaPath := filepath.Join(d, snapshotMetaFile)
		b, err := os.ReadFile(metaPath)
		var meta struct {
			Index, Term uint64
			Size        int64
			CRC         []byte
		}
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err == nil && len(meta.CRC) == 0 {
			err = errors.New("no CRC")
		}
		if err != nil {
			return &raftlog.Corruption{File: metaPath, Offset: -1, Reason: "snapshot metadata unreadable: " + err.Error(), Err: err, At: time.Now()}
		}
		snaps = append(snaps, snap{dir: d, index: meta.Index, term: meta.Term, size: meta.Size, crc: meta.CRC})
	}
	newest := -1
	for i, s := range snaps {
		if newest < 0 || s.term > snaps[newest].term || (s.term == snaps[newest].term && s.index > snaps[newest].index) {
			newest = i
		}
	}
	if !state || newest < 0 {
		return nil
	}
	s := snaps[newest]
	return verifySnapshotState(filepath.Join(s.dir, snapshotStateFile), s.size, s.crc)
}

// verifySnapshotState reads a snapshot's state file whole and compares
// its size and CRC-64 with its metadata's.
func verifySnapshotState(path string, size int64, want []byte) *raftlog.Corruption {
	bad := func(reason string, err error) *raftlog.Corruption {
		return &raftlog.Corruption{File: path, Offset: -1, Reason: reason, Err: err, At: time.Now()}
	}
	f, err := os.Open(path)
	if err != nil {
		return bad("snapshot state file unreadable: "+err.Error(), err)
	}
	defer f.Close()
	h := crc64.New(crcTable)
	n, err := io.Copy(h, f)
	if err != nil {
		return bad("snapshot state file unreadable: "+err.Error(), err)
	}
	if n != size {
		return &raftlog.Corruption{File: path, Offset: n, Reason: fmt.Sprintf("snapshot state file is %d bytes, its metadata says %d", n, size), At: time.Now()}
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		return bad(fmt.Sprintf("snapshot state file CRC-64 mismatch: stored %x, computed %x (the CRC covers the whole file, so the offset is unknown)", want, got), nil)
	}
	return nil
}

// checkAtStart looks for corruption before the node opens its Raft
// state: a marker an earlier run left, the wal's segments (raftlog.VerifyWAL,
// before raft-wal opens them and would trust them) and every snapshot's
// metadata. The newest snapshot's state file is checked as it is
// restored, and bolt's entries once the store is open (raftlog.Checked.VerifyEntries).
func checkAtStart(dataDir, snapDir string) (*raftlog.Corruption, error) {
	c, err := RecordedCorruption(dataDir)
	if err != nil || c != nil {
		return c, err
	}
	if c, err := raftlog.VerifyLogFiles(dataDir); err != nil || c != nil {
		return c, err
	}
	return verifySnapshots(snapDir, false), nil
}

// Corrupt returns the damage this node found in its Raft state, nil if
// none. A node with one takes no part in Raft: it is removed from the
// configuration for repair and rebuilt from its peers.
func (g *Group) Corrupt() *raftlog.Corruption { return g.corrupt.Load() }

// CorruptFound is closed when this node finds its Raft state corrupt
// while it runs (already closed if it started with corrupt state).
func (g *Group) CorruptFound() <-chan struct{} { return g.corruptCh }

// Quarantined reports whether this node started with corrupt state, so
// runs no Raft of its own: what is left is to be removed and rebuilt.
func (g *Group) Quarantined() bool { return g.quarantined }

// quarantine records the corruption found at start: the group runs Raft
// on empty stores, its layer of the port cut off from its peers (Open).
func (g *Group) quarantine(c *raftlog.Corruption) {
	g.quarantined = true
	g.log.Error("this node's Raft state is corrupt: it takes no part in Raft (no vote, no reads, no writes) and waits to be removed and rebuilt from its peers",
		"file", c.File, "offset", c.Offset, "index", c.Index, "reason", c.Reason, "found", c.At)
	g.setCorrupt(c)
}

// reportCorrupt is told of every corrupt read while the node runs; the
// first stops Raft here (the reader does, see raftlog.Checked) and asks
// for a restart into quarantine.
func (g *Group) reportCorrupt(c *raftlog.Corruption) {
	if c.At.IsZero() {
		c.At = time.Now()
	}
	if g.corrupt.Load() != nil {
		return
	}
	g.log.Error("corrupt Raft state read: this node stops taking part in Raft and waits to be removed and rebuilt from its peers",
		"file", c.File, "offset", c.Offset, "index", c.Index, "reason", c.Reason)
	g.setCorrupt(c)
}

// setCorrupt records c (the first one only): in the data dir, so that
// every later start quarantines, in gossip, and for CorruptFound.
func (g *Group) setCorrupt(c *raftlog.Corruption) {
	g.corruptOnce.Do(func() {
		g.corrupt.Store(c)
		if err := writeCorruptMarker(g.cfg.Dir, c); err != nil {
			g.log.Error("could not record the corruption in the data dir; a restart checks again", "err", err)
		}
		if g.cfg.OnCorrupt != nil {
			g.cfg.OnCorrupt(c.Error())
		}
		close(g.corruptCh)
	})
}

// setSnapshotAside handles a newest snapshot found corrupt at start: if
// the next older one is whole and the log holds every entry from it to
// the damaged one's index, the damaged one is moved out of the snapshot
// store (into corrupt-snapshots/, for a post-mortem) and raft restores the
// older one and replays the log: the same state, from this node's own
// checked data. Otherwise it reports false, and the node quarantines.
func (g *Group) setSnapshotAside(c *raftlog.Corruption, newest *raft.SnapshotMeta, log raft.LogStore) bool {
	metas, err := g.snaps.List()
	if err != nil || len(metas) < 2 || metas[0].ID != newest.ID || log == nil {
		return false
	}
	snapDir := filepath.Join(g.cfg.Dir, "snapshots")
	if !strings.HasPrefix(c.File, filepath.Join(snapDir, newest.ID)+string(filepath.Separator)) {
		return false
	}
	older := metas[1]
	if verifySnapshotState(filepath.Join(snapDir, older.ID, snapshotStateFile), older.Size, snapshotCRC(snapDir, older.ID)) != nil {
		return false
	}
	first, ferr := log.FirstIndex()
	last, lerr := log.LastIndex()
	if ferr != nil || lerr != nil || first == 0 || first > older.Index+1 || last < newest.Index {
		return false
	}
	aside := filepath.Join(g.cfg.Dir, "corrupt-snapshots")
	if err := os.MkdirAll(aside, 0o750); err != nil {
		return false
	}
	if err := os.Rename(filepath.Join(snapDir, newest.ID), filepath.Join(aside, newest.ID)); err != nil {
		return false
	}
	if err := raftlog.SyncDir(snapDir); err != nil {
		g.log.Warn("could not sync the snapshot dir after moving a damaged snapshot out", "err", err)
	}
	g.log.Error("the newest snapshot is corrupt: moved it aside; restoring the one before it and replaying the log, which holds every entry since",
		"file", c.File, "offset", c.Offset, "reason", c.Reason, "moved_to", filepath.Join(aside, newest.ID),
		"older_snapshot", older.ID, "log_first_index", first)
	return true
}

// snapshotCRC is the CRC a snapshot's metadata records (nil if unreadable).
func snapshotCRC(snapDir, id string) []byte {
	b, err := os.ReadFile(filepath.Join(snapDir, id, snapshotMetaFile))
	if err != nil {
		return nil
	}
	var meta struct{ CRC []byte }
	if json.Unmarshal(b, &meta) != nil {
		return nil
	}
	return meta.CRC
}
