package raftlog

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

func TestSyncs(t *testing.T) {
	var nilSyncs *Syncs
	if nilSyncs.Busy() {
		t.Error("a nil Syncs is busy")
	}
	var s Syncs
	if s.Busy() {
		t.Fatal("a new Syncs is busy")
	}
	s.begin()
	idle := s.Idle()
	s.begin() // two fsyncs at once (a rotation's and an append's)
	s.end()
	select {
	case <-idle:
		t.Fatal("idle with one of two fsyncs still in progress")
	default:
	}
	s.end()
	select {
	case <-idle:
	default:
		t.Fatal("the channel taken during the fsyncs was not closed when they ended")
	}
	if s.Busy() {
		t.Error("busy after every fsync ended")
	}
}

// busyAtSyncFS records, at every Sync of its files, whether syncs said an
// fsync was in progress.
type busyAtSyncFS struct {
	types.VFS
	syncs *Syncs
	mu    sync.Mutex
	seen  []bool
}

func (f *busyAtSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	w, err := f.VFS.Create(dir, name, size)
	return &busyAtSyncFile{WritableFile: w, fs: f}, err
}

func (f *busyAtSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	w, err := f.VFS.OpenWriter(dir, name)
	return &busyAtSyncFile{WritableFile: w, fs: f}, err
}

type busyAtSyncFile struct {
	types.WritableFile
	fs *busyAtSyncFS
}

func (f *busyAtSyncFile) Sync() error {
	f.fs.mu.Lock()
	f.fs.seen = append(f.fs.seen, f.fs.syncs.Busy())
	f.fs.mu.Unlock()
	return f.WritableFile.Sync()
}

// TestWALPublishesItsFsyncs: every fsync of the wal's segments is marked
// in progress while it runs (the snapshot's write-behind waits for it),
// and the log is idle again once the append returns.
func TestWALPublishesItsFsyncs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), WALDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	rec := &busyAtSyncFS{VFS: walfs.New()}
	s := &walStore{dir: dir, log: hclog.NewNullLogger(), vfs: &timedVFS{VFS: rec}, segmentSize: 1 << 20}
	rec.syncs = &s.vfs.syncs
	w, err := s.open()
	if err != nil {
		t.Fatal(err)
	}
	s.w = w
	s.cur.Store(w)
	opened := walOpened(s)
	defer opened.Close()
	if opened.Syncs != &s.vfs.syncs {
		t.Fatal("Opened.Syncs is not the wal's segment files' publisher")
	}
	for i := uint64(1); i <= 3; i++ {
		if err := s.StoreLogs(testLogs(i, i)); err != nil {
			t.Fatal(err)
		}
		if opened.Syncs.Busy() {
			t.Fatalf("busy after append %d returned", i)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) < 3 {
		t.Fatalf("%d segment fsyncs for 3 appends", len(rec.seen))
	}
	for i, busy := range rec.seen {
		if !busy {
			t.Errorf("segment fsync %d ran without being published", i)
		}
	}
}
