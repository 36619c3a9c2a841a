package raftlog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func testLogs(first, last uint64) []*raft.Log {
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d", i)})
	}
	return logs
}

func openStable(t *testing.T, dataDir string) *raftboltdb.BoltStore {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dataDir, RaftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// layout describes a data dir as a node, or an earlier build, leaves it.
type layout struct {
	boltLast uint64 // raft.db's log holds 1..boltLast
	boltTerm uint64 // raft.db's current term (0: none)
	noDB     bool   // no raft.db at all
	withWAL  bool   // wal/ exists
	walLast  uint64 // wal/ holds 1..walLast
	walTerm  uint64 // the wal's stable store's current term
	marked   bool   // raft.db is the wal marker (the wal layout)
}

// dataDirWith makes a data dir laid out as l says.
func dataDirWith(t *testing.T, l layout) string {
	t.Helper()
	dir := t.TempDir()
	if !l.noDB && !l.marked {
		stable := openStable(t, dir)
		if l.boltLast > 0 {
			if err := stable.StoreLogs(testLogs(1, l.boltLast)); err != nil {
				t.Fatal(err)
			}
		}
		if l.boltTerm > 0 {
			if err := stable.SetUint64([]byte(KeyCurrentTerm), l.boltTerm); err != nil {
				t.Fatal(err)
			}
		}
		if err := stable.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if l.withWAL {
		if err := os.Mkdir(filepath.Join(dir, WALDir), 0o750); err != nil {
			t.Fatal(err)
		}
		w, err := openWAL(filepath.Join(dir, WALDir), hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if l.walLast > 0 {
			if err := w.StoreLogs(testLogs(1, l.walLast)); err != nil {
				t.Fatal(err)
			}
		}
		if l.walTerm > 0 {
			if err := w.SetUint64([]byte(KeyCurrentTerm), l.walTerm); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if l.marked {
		if err := writeWALMarker(dir); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestOpenLogStore: the store holding the Raft state wins and a
// contradicting choice is refused without changing anything; a dir with
// no state takes the choice or the default; a bolt dir with a term but no
// log moves to the wal only when asked; the layout before the marker is
// converted; the log and the term read back are the ones written, and a
// wal dir ends with raft.db as the marker.
func TestOpenLogStore(t *testing.T) {
	for _, tc := range []struct {
		name             string
		dir              layout
		want             LogStore
		got              LogStore // "" with errWant
		lastIndex, term  uint64
		errWant          string
		mismatchSentinel bool
	}{
		{name: "new dir, auto", dir: layout{noDB: true}, want: LogStoreAuto, got: DefaultLogStore},
		{name: "new dir, wal", dir: layout{noDB: true}, want: LogStoreWAL, got: LogStoreWAL},
		{name: "new dir, bolt", dir: layout{noDB: true}, want: LogStoreBolt, got: LogStoreBolt},
		{name: "bolt log, auto", dir: layout{boltLast: 5, boltTerm: 3}, got: LogStoreBolt, lastIndex: 5, term: 3},
		{name: "bolt log, bolt", dir: layout{boltLast: 5, boltTerm: 3}, want: LogStoreBolt, got: LogStoreBolt, lastIndex: 5, term: 3},
		{name: "bolt log, wal refused", dir: layout{boltLast: 5, boltTerm: 3}, want: LogStoreWAL, errWant: "holds this node's Raft state in the bolt store", mismatchSentinel: true},
		{name: "bolt term without a log stays bolt", dir: layout{boltTerm: 3}, got: LogStoreBolt, term: 3},
		{name: "bolt term without a log, wal asked: term moved", dir: layout{boltTerm: 3}, want: LogStoreWAL, got: LogStoreWAL, term: 3},
		{name: "empty bolt raft.db, auto", dir: layout{}, got: LogStoreBolt},
		{name: "empty bolt raft.db, wal", dir: layout{}, want: LogStoreWAL, got: LogStoreWAL},
		{name: "wal before the marker, auto: converted", dir: layout{boltTerm: 4, withWAL: true, walLast: 7}, got: LogStoreWAL, lastIndex: 7, term: 4},
		{name: "wal before the marker, wal: converted", dir: layout{boltTerm: 4, withWAL: true, walLast: 7}, want: LogStoreWAL, got: LogStoreWAL, lastIndex: 7, term: 4},
		{name: "wal before the marker, bolt refused", dir: layout{boltTerm: 4, withWAL: true, walLast: 7}, want: LogStoreBolt, errWant: "holds this node's Raft state in the wal store", mismatchSentinel: true},
		{name: "wal dir, auto", dir: layout{marked: true, withWAL: true, walLast: 7, walTerm: 5}, got: LogStoreWAL, lastIndex: 7, term: 5},
		{name: "wal dir, wal", dir: layout{marked: true, withWAL: true, walLast: 7, walTerm: 5}, want: LogStoreWAL, got: LogStoreWAL, lastIndex: 7, term: 5},
		{name: "wal dir, bolt refused", dir: layout{marked: true, withWAL: true, walLast: 7, walTerm: 5}, want: LogStoreBolt, errWant: "holds this node's Raft state in the wal store", mismatchSentinel: true},
		{name: "wal dir with an empty log, bolt refused", dir: layout{marked: true, withWAL: true, walTerm: 5}, want: LogStoreBolt, errWant: "in the wal store", mismatchSentinel: true},
		{name: "marker without wal/", dir: layout{marked: true}, errWant: "is missing"},
		{name: "wal log without raft.db", dir: layout{noDB: true, withWAL: true, walLast: 7}, errWant: "is missing"},
		{name: "empty wal without raft.db, bolt: wal removed", dir: layout{noDB: true, withWAL: true}, want: LogStoreBolt, got: LogStoreBolt},
		{name: "empty wal without raft.db, auto", dir: layout{noDB: true, withWAL: true}, got: DefaultLogStore},
		{name: "empty wal beside raft.db, bolt: wal removed", dir: layout{withWAL: true}, want: LogStoreBolt, got: LogStoreBolt},
		{name: "bolt log beside an empty wal", dir: layout{boltLast: 3, withWAL: true}, got: LogStoreBolt, lastIndex: 3},
		{name: "both hold a log", dir: layout{boltLast: 3, withWAL: true, walLast: 4}, errWant: "both raft.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := dataDirWith(t, tc.dir)
			before := snapshotDir(t, dir)
			l, err := Open(dir, tc.want, hclog.NewNullLogger())
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err %v, want one containing %q", err, tc.errWant)
				}
				if got := errors.Is(err, ErrLogStoreMismatch); got != tc.mismatchSentinel {
					t.Errorf("errors.Is(err, ErrLogStoreMismatch) = %v, want %v", got, tc.mismatchSentinel)
				}
				// A refusal changes nothing.
				if after := snapshotDir(t, dir); after != before {
					t.Errorf("the data dir changed:\nbefore %s\nafter  %s", before, after)
				}
				if !tc.dir.noDB && !tc.dir.marked {
					stable := openStable(t, dir)
					defer stable.Close()
					last, _ := stable.LastIndex()
					term, _ := stable.GetUint64([]byte(KeyCurrentTerm))
					if last != tc.dir.boltLast || term != tc.dir.boltTerm {
						t.Errorf("raft.db now holds the log to %d and term %d, want %d and %d", last, term, tc.dir.boltLast, tc.dir.boltTerm)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Kind != tc.got {
				t.Errorf("store %q, want %q", l.Kind, tc.got)
			}
			last, err := l.Store.LastIndex()
			if err != nil || last != tc.lastIndex {
				t.Errorf("last index %d (%v), want %d", last, err, tc.lastIndex)
			}
			if tc.lastIndex > 0 {
				var e raft.Log
				if err := l.Store.GetLog(tc.lastIndex, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", tc.lastIndex) {
					t.Errorf("entry %d: %q (%v)", tc.lastIndex, e.Data, err)
				}
			}
			if term, _ := l.Stable.GetUint64([]byte(KeyCurrentTerm)); term != tc.term {
				t.Errorf("current term %d, want %d", term, tc.term)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_, err = os.Stat(filepath.Join(dir, WALDir))
			if exists := err == nil; exists != (l.Kind == LogStoreWAL) {
				t.Errorf("wal dir exists: %v with the %s store", exists, l.Kind)
			}
			_, marked, err := readRaftDB(filepath.Join(dir, RaftDBFile))
			if err != nil || marked != (l.Kind == LogStoreWAL) {
				t.Errorf("raft.db is the wal marker: %v (%v) with the %s store", marked, err, l.Kind)
			}
			// The next start, asking nothing, finds the same.
			l2, err := Open(dir, LogStoreAuto, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if l2.Kind != l.Kind {
				t.Errorf("reopened as %q, first opened as %q", l2.Kind, l.Kind)
			}
			if term, _ := l2.Stable.GetUint64([]byte(KeyCurrentTerm)); term != tc.term {
				t.Errorf("after reopening, current term %d, want %d", term, tc.term)
			}
		})
	}
}

// snapshotDir lists every file under dir with a digest of its contents,
// but for a bolt raft.db, whose opening writes a transaction (its log and
// term are compared instead).
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			fmt.Fprintf(&b, "%s/ ", rel)
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == RaftDBFile && !strings.HasPrefix(string(data), walMarkerMagic) {
			fmt.Fprintf(&b, "%s:bolt ", rel)
			return nil
		}
		fmt.Fprintf(&b, "%s:%x ", rel, sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestWALReopen: what the wal stored is read back after it is closed and
// opened again (as auto), and the time its writes took was counted.
func TestWALReopen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	timed := NewTimed(l.Store, l.DiskTime)
	for i := uint64(0); i < 10; i++ {
		if err := timed.StoreLogs(testLogs(10*i+1, 10*i+10)); err != nil {
			t.Fatal(err)
		}
	}
	if st := timed.Stats(); st.Fsync.Count != 10 || st.Fsync.Sum <= 0 {
		t.Errorf("fsync histogram: %d observations, %v s; want 10, > 0", st.Fsync.Count, st.Fsync.Sum)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, LogStoreAuto, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Kind != LogStoreWAL {
		t.Fatalf("reopened as %q", l.Kind)
	}
	first, _ := l.Store.FirstIndex()
	last, _ := l.Store.LastIndex()
	if first != 1 || last != 100 {
		t.Fatalf("log %d..%d, want 1..100", first, last)
	}
	for i := uint64(1); i <= 100; i++ {
		var e raft.Log
		if err := l.Store.GetLog(i, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", i) {
			t.Fatalf("entry %d: %q (%v)", i, e.Data, err)
		}
	}
}

// TestLogStackMonotonic: raft asks the log it is given (the cache over
// the timing and chunking wrappers) whether gaps are allowed. The wal
// allows none, so raft must hear "monotonic" through every wrapper, or
// after installing a snapshot it leaves the old log in place and the
// next append fails as non-monotonic.
func TestLogStackMonotonic(t *testing.T) {
	for _, tc := range []struct {
		kind LogStore
		want bool
	}{{LogStoreWAL, true}, {LogStoreBolt, false}} {
		l, err := Open(t.TempDir(), tc.kind, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		timed := NewTimed(l.Store, l.DiskTime)
		chunked := NewChunked(timed, CompactChunk)
		for name, under := range map[string]raft.LogStore{
			"timed":         timed,
			"chunked":       chunked,
			"space/timed":   &Space{LogStore: timed},
			"space/chunked": &Space{LogStore: chunked},
			"watched/space": &Watched{LogStore: &Space{LogStore: timed}, Appended: func(uint64) {}},
		} {
			cache, err := raft.NewLogCache(512, under) // the node's log cache size
			if err != nil {
				t.Fatal(err)
			}
			if got := cache.IsMonotonic(); got != tc.want {
				t.Errorf("%s: cache over %s store: IsMonotonic %v, want %v", tc.kind, name, got, tc.want)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALTailTruncationSurvivesRestart: a follower that drops a
// conflicting suffix of its log (DeleteRange to the end, within the
// segment being written) must start again afterwards. raft-wal v0.4.0
// marked that segment sealed without writing its index, and the next
// start failed to read any entry of it ("sealed segment has no index
// block"): raft panicked in NewRaft, seen in the chaos run after a kill
// (hashicorp/raft-wal#31, fixed in v0.4.1).
func TestWALTailTruncationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, LogStoreWAL, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Store.StoreLogs(testLogs(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := l.Store.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	if err := l.Store.StoreLogs(testLogs(9, 12)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, LogStoreAuto, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if last, err := l.Store.LastIndex(); err != nil || last != 12 {
		t.Fatalf("last index %d (%v), want 12", last, err)
	}
	for i := uint64(1); i <= 12; i++ {
		var e raft.Log
		if err := l.Store.GetLog(i, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", i) {
			t.Fatalf("after a restart, entry %d: %q (%v)", i, e.Data, err)
		}
	}
}

// TestWALReadsDuringReopen: a read of the log that meets the wal closed
// for a reopen (after a failed write) waits for the reopen and answers
// from the reopened wal. It used to fail ("being reopened", or raft-wal's
// ErrClosed when the reopen closed the wal under it), and raft panics
// when a read of a committed entry fails (processLogs).
func TestWALReadsDuringReopen(t *testing.T) {
	s, err := openWALSized(t.TempDir(), hclog.NewNullLogger(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.StoreLogs(testLogs(1, 10)); err != nil {
		t.Fatal(err)
	}
	var (
		stop      atomic.Bool
		inWindow  atomic.Int64 // reads that started while the wal was closed
		readErr   atomic.Value
		readerEnd = make(chan struct{})
	)
	go func() {
		defer close(readerEnd)
		for i := uint64(0); !stop.Load(); i++ {
			if s.cur.Load() == nil {
				inWindow.Add(1)
			}
			var l raft.Log
			idx := i%10 + 1
			var err error
			switch i % 3 {
			case 0:
				err = s.GetLog(idx, &l)
				if err == nil && string(l.Data) != fmt.Sprintf("entry %d", idx) {
					err = fmt.Errorf("entry %d reads %q", idx, l.Data)
				}
			case 1:
				var first uint64
				if first, err = s.FirstIndex(); err == nil && first != 1 {
					err = fmt.Errorf("first index %d, want 1", first)
				}
			case 2:
				var last uint64
				if last, err = s.LastIndex(); err == nil && last != 10 {
					err = fmt.Errorf("last index %d, want 10", last)
				}
			}
			if err != nil {
				readErr.CompareAndSwap(nil, err)
				return
			}
		}
	}()
	// Reopen (as after a failed write) until reads have met the window a
	// few times, or a read failed.
	deadline := time.Now().Add(20 * time.Second)
	for inWindow.Load() < 20 && readErr.Load() == nil && time.Now().Before(deadline) {
		s.mu.Lock()
		s.broken = errors.New("a write failed (test)")
		err := s.repairLocked()
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	<-readerEnd
	if err := readErr.Load(); err != nil {
		t.Fatalf("a read during a reopen failed: %v", err)
	}
	if n := inWindow.Load(); n < 20 {
		t.Fatalf("only %d reads met the wal closed for a reopen in 20 s: the test did not exercise the window", n)
	}
}

// TestOpenSizedMakesSmallSegments: a log opened with a small segment size
// allocates its segment at that size, not the 64 MiB default (the meta
// group's log on a small disk), and reopens with it.
func TestOpenSizedMakesSmallSegments(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		o, err := OpenSized(dir, LogStoreWAL, 1<<20, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if last, err := o.Store.LastIndex(); err != nil {
			t.Fatal(err)
		} else if err := o.Store.StoreLog(&raft.Log{Index: last + 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		segs, _ := filepath.Glob(filepath.Join(dir, WALDir, "*.wal"))
		if len(segs) == 0 {
			t.Fatal("no segment")
		}
		for _, s := range segs {
			fi, err := os.Stat(s)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() > 1<<20 {
				t.Fatalf("segment %s is %d bytes, want at most 1 MiB", s, fi.Size())
			}
		}
	}
}
