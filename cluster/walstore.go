package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// LogStore names where a node keeps its Raft log. The stable store (term,
// vote) is bolt's raft.db with either.
type LogStore string

const (
	// LogStoreAuto is the data dir's log store if it holds a log, else
	// DefaultLogStore.
	LogStoreAuto LogStore = ""
	// LogStoreWAL is hashicorp/raft-wal in DataDir/wal: segment files
	// appended to, one fsync per batch, entries in a binary encoding.
	LogStoreWAL LogStore = "wal"
	// LogStoreBolt is raft-boltdb's raft.db (the log beside the stable
	// store): a B+tree transaction per batch, two fdatasyncs, msgpack.
	LogStoreBolt LogStore = "bolt"

	// DefaultLogStore is what a new data dir gets (cluster/DESIGN.md,
	// "The log store", says why).
	DefaultLogStore = LogStoreBolt

	// walDir is the wal log store's directory in the data dir.
	walDir = "wal"
)

// ParseLogStore checks a log store name: "wal", "bolt" or "" (auto).
func ParseLogStore(s string) (LogStore, error) {
	switch ls := LogStore(s); ls {
	case LogStoreAuto, LogStoreWAL, LogStoreBolt:
		return ls, nil
	}
	return "", fmt.Errorf("log store %q: want wal or bolt", s)
}

// ErrLogStoreMismatch is returned by New when Config.LogStore names a log
// store other than the one holding the data dir's log: switching would
// start from an empty log and lose what the other holds.
var ErrLogStoreMismatch = errors.New("cluster: the data dir's Raft log is in another log store")

// openedLog is the log store a node runs on.
type openedLog struct {
	kind  LogStore
	store raft.LogStore
	// diskTime is the store's running total of write and sync time.
	diskTime func() time.Duration
	// close releases it (nil for bolt: the stable store's Close does).
	close func() error
}

// openLogStore opens the data dir's log store. Which one: the store that
// holds a log (entries) wins, and want must then agree with it; a data
// dir whose log is empty everywhere (new, restored from a backup, wiped
// for repair) takes want, or DefaultLogStore. An empty log loses nothing
// by being replaced: the state is in the snapshot and the stable store,
// which both stores share. A wal directory whose log is empty is removed
// when bolt is chosen, so the choice made is the one found next time.
func openLogStore(dataDir string, want LogStore, stable *raftboltdb.BoltStore, log hclog.Logger) (_ *openedLog, err error) {
	boltLast, err := stable.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("bolt log: %w", err)
	}
	dir := filepath.Join(dataDir, walDir)
	var w *walStore
	defer func() {
		if err != nil && w != nil {
			_ = w.Close()
		}
	}()
	var found LogStore
	if boltLast > 0 {
		found = LogStoreBolt
	}
	switch _, err := os.Stat(dir); {
	case err == nil:
		if w, err = openWAL(dir, log); err != nil {
			return nil, err
		}
		walLast, err := w.LastIndex()
		if err != nil {
			return nil, fmt.Errorf("wal log: %w", err)
		}
		if walLast > 0 && found == LogStoreBolt {
			return nil, fmt.Errorf("both raft.db (up to index %d) and %s (up to index %d) hold a Raft log; "+
				"move the one that is not this node's aside", boltLast, dir, walLast)
		}
		if walLast > 0 {
			found = LogStoreWAL
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("wal log: %w", err)
	}

	kind := cmpOr(found, want, DefaultLogStore)
	if found != LogStoreAuto && want != LogStoreAuto && want != found {
		return nil, fmt.Errorf("%w: asked for the %s log store, but %s holds this node's log in the %s store; "+
			"drop the log store setting (the data dir's is used) or give the node a new data dir",
			ErrLogStoreMismatch, want, dataDir, found)
	}
	if kind == LogStoreBolt {
		if w != nil { // empty, or found would be wal
			if err := w.Close(); err != nil {
				return nil, fmt.Errorf("wal log: %w", err)
			}
			w = nil
			if err := os.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("remove the empty wal log: %w", err)
			}
			if err := syncDir(dataDir); err != nil {
				return nil, err
			}
		}
		return &openedLog{kind: kind, store: stable, diskTime: func() time.Duration {
			return stable.Stats().TxStats.WriteTime
		}}, nil
	}
	if w == nil {
		if err := os.Mkdir(dir, 0o750); err != nil {
			return nil, fmt.Errorf("wal log: %w", err)
		}
		if err := syncDir(dataDir); err != nil {
			return nil, err
		}
		if w, err = openWAL(dir, log); err != nil {
			return nil, err
		}
	}
	return &openedLog{kind: kind, store: w, diskTime: w.vfs.total, close: w.Close}, nil
}

func cmpOr(vals ...LogStore) LogStore {
	for _, v := range vals {
		if v != LogStoreAuto {
			return v
		}
	}
	return LogStoreAuto
}

// walStore is raft-wal on a file system that times its writes.
type walStore struct {
	*wal.WAL
	vfs *timedVFS
}

// openWAL opens the wal in dir. v0.4.1 or later: v0.4.0 left a segment
// truncated at its tail unreadable after a restart (hashicorp/raft-wal#31;
// TestWALTailTruncationSurvivesRestart), and did not close its metadata
// file.
func openWAL(dir string, log hclog.Logger) (*walStore, error) {
	if err := finishRotation(dir, log); err != nil {
		return nil, fmt.Errorf("wal log in %s: %w", dir, err)
	}
	vfs := &timedVFS{VFS: walfs.New()}
	w, err := wal.Open(dir, wal.WithLogger(log), wal.WithSegmentFiler(segment.NewFiler(dir, vfs)))
	if err != nil {
		return nil, fmt.Errorf("wal log in %s: %w", dir, err)
	}
	return &walStore{WAL: w, vfs: vfs}, nil
}

// finishRotation completes a segment rotation that a crash interrupted.
// The append that fills a segment writes the segment's index and is
// fsynced; the rotation that records the segment as sealed and starts the
// next one runs after it, on the wal's own goroutine. Killed in between,
// the metadata still calls the sealed segment the tail, and raft-wal
// v0.4.1 reopens it as such and refuses every append ("segment is
// sealed") for good (TestWALKilledBetweenSealAndRotation). This records
// what the rotation would have: the tail sealed where its index says,
// and a next segment, whose file wal.Open creates (as after a crash
// between a rotation's commit and the new file). One metadata commit,
// atomic: a crash before it leaves the same state for the next start.
func finishRotation(dir string, log hclog.Logger) error {
	meta := &metadb.BoltMetaDB{}
	st, err := meta.Load(dir)
	if err != nil {
		return err
	}
	defer meta.Close()
	n := len(st.Segments)
	if n == 0 || !st.Segments[n-1].SealTime.IsZero() {
		return nil
	}
	tail := st.Segments[n-1]
	sw, err := segment.NewFiler(dir, walfs.New()).RecoverTail(tail)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // created by wal.Open
	}
	if err != nil {
		return err
	}
	sealed, indexStart, err := sw.Sealed()
	last := sw.LastIndex()
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err != nil || !sealed {
		return err
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	next := types.SegmentInfo{ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		SizeLimit: uint32(wal.DefaultSegmentSize), Codec: tail.Codec, CreateTime: now}
	st.Segments = append(st.Segments[:n-1], tail, next)
	st.NextSegmentID++
	if err := meta.CommitState(st); err != nil {
		return err
	}
	log.Warn("finished a segment rotation interrupted by a crash", "segment", tail.ID, "last_index", last)
	return nil
}

// timedVFS is the wal's file system, counting the time its segment
// writers spend writing and syncing (the disk part of an append).
type timedVFS struct {
	types.VFS
	nanos atomic.Int64
}

func (v *timedVFS) total() time.Duration { return time.Duration(v.nanos.Load()) }

func (v *timedVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &timedFile{WritableFile: f, nanos: &v.nanos}, nil
}

func (v *timedVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &timedFile{WritableFile: f, nanos: &v.nanos}, nil
}

type timedFile struct {
	types.WritableFile
	nanos *atomic.Int64
}

func (f *timedFile) WriteAt(p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := f.WritableFile.WriteAt(p, off)
	f.nanos.Add(int64(time.Since(start)))
	return n, err
}

func (f *timedFile) Sync() error {
	start := time.Now()
	err := f.WritableFile.Sync()
	f.nanos.Add(int64(time.Since(start)))
	return err
}

var (
	_ raft.LogStore          = (*walStore)(nil)
	_ raft.MonotonicLogStore = (*walStore)(nil)
	_ io.Closer              = (*walStore)(nil)
)
