package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dataDir, raftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dataDirWith makes a data dir whose bolt log holds 1..boltLast and whose
// wal (when withWAL) holds 1..walLast, as a node would have left it.
func dataDirWith(t *testing.T, boltLast uint64, withWAL bool, walLast uint64) string {
	t.Helper()
	dir := t.TempDir()
	stable := openStable(t, dir)
	defer stable.Close()
	if boltLast > 0 {
		if err := stable.StoreLogs(testLogs(1, boltLast)); err != nil {
			t.Fatal(err)
		}
	}
	if withWAL {
		if err := os.Mkdir(filepath.Join(dir, walDir), 0o750); err != nil {
			t.Fatal(err)
		}
		w, err := openWAL(filepath.Join(dir, walDir), hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if walLast > 0 {
			if err := w.StoreLogs(testLogs(1, walLast)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestOpenLogStore: the store holding the log wins and a contradicting
// choice is refused without changing anything; a dir with no log takes the
// choice or the default; the log read back is the one written.
func TestOpenLogStore(t *testing.T) {
	for _, tc := range []struct {
		name             string
		boltLast         uint64
		withWAL          bool
		walLast          uint64
		want             LogStore
		got              LogStore // "" with errWant
		lastIndex        uint64
		errWant          string
		walDirAfter      bool
		mismatchSentinel bool
	}{
		{name: "new dir, auto", want: LogStoreAuto, got: DefaultLogStore, walDirAfter: DefaultLogStore == LogStoreWAL},
		{name: "new dir, wal", want: LogStoreWAL, got: LogStoreWAL, walDirAfter: true},
		{name: "new dir, bolt", want: LogStoreBolt, got: LogStoreBolt},
		{name: "bolt log, auto", boltLast: 5, got: LogStoreBolt, lastIndex: 5},
		{name: "bolt log, bolt", boltLast: 5, want: LogStoreBolt, got: LogStoreBolt, lastIndex: 5},
		{name: "bolt log, wal refused", boltLast: 5, want: LogStoreWAL, errWant: "holds this node's log in the bolt store", mismatchSentinel: true},
		{name: "wal log, auto", withWAL: true, walLast: 7, got: LogStoreWAL, lastIndex: 7, walDirAfter: true},
		{name: "wal log, wal", withWAL: true, walLast: 7, want: LogStoreWAL, got: LogStoreWAL, lastIndex: 7, walDirAfter: true},
		{name: "wal log, bolt refused", withWAL: true, walLast: 7, want: LogStoreBolt, errWant: "holds this node's log in the wal store", mismatchSentinel: true, walDirAfter: true},
		{name: "empty wal, bolt chosen: wal removed", withWAL: true, want: LogStoreBolt, got: LogStoreBolt},
		{name: "empty wal, auto", withWAL: true, got: DefaultLogStore, walDirAfter: DefaultLogStore == LogStoreWAL},
		{name: "bolt log beside an empty wal", boltLast: 3, withWAL: true, got: LogStoreBolt, lastIndex: 3},
		{name: "both hold a log", boltLast: 3, withWAL: true, walLast: 4, errWant: "both raft.db", walDirAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := dataDirWith(t, tc.boltLast, tc.withWAL, tc.walLast)
			stable := openStable(t, dir)
			defer stable.Close()
			l, err := openLogStore(dir, tc.want, stable, hclog.NewNullLogger())
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err %v, want one containing %q", err, tc.errWant)
				}
				if got := errors.Is(err, ErrLogStoreMismatch); got != tc.mismatchSentinel {
					t.Errorf("errors.Is(err, ErrLogStoreMismatch) = %v, want %v", got, tc.mismatchSentinel)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if l.kind != tc.got {
					t.Errorf("store %q, want %q", l.kind, tc.got)
				}
				last, err := l.store.LastIndex()
				if err != nil || last != tc.lastIndex {
					t.Errorf("last index %d (%v), want %d", last, err, tc.lastIndex)
				}
				if tc.lastIndex > 0 {
					var e raft.Log
					if err := l.store.GetLog(tc.lastIndex, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", tc.lastIndex) {
						t.Errorf("entry %d: %q (%v)", tc.lastIndex, e.Data, err)
					}
				}
				if l.close != nil {
					if err := l.close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			_, err = os.Stat(filepath.Join(dir, walDir))
			if exists := err == nil; exists != tc.walDirAfter {
				t.Errorf("wal dir exists: %v, want %v", exists, tc.walDirAfter)
			}
			// A refusal changes nothing: the log is still where it was.
			if last, _ := stable.LastIndex(); last != tc.boltLast {
				t.Errorf("bolt log now ends at %d, want %d", last, tc.boltLast)
			}
		})
	}
}

// TestWALReopen: what the wal stored is read back after it is closed and
// opened again (as auto), and the time its writes took was counted.
func TestWALReopen(t *testing.T) {
	dir := t.TempDir()
	stable := openStable(t, dir)
	defer stable.Close()
	l, err := openLogStore(dir, LogStoreWAL, stable, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	timed := newTimedLogStore(l.store, l.diskTime)
	for i := uint64(0); i < 10; i++ {
		if err := timed.StoreLogs(testLogs(10*i+1, 10*i+10)); err != nil {
			t.Fatal(err)
		}
	}
	if st := timed.stats(); st.Fsync.Count != 10 || st.Fsync.Sum <= 0 {
		t.Errorf("fsync histogram: %d observations, %v s; want 10, > 0", st.Fsync.Count, st.Fsync.Sum)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l, err = openLogStore(dir, LogStoreAuto, stable, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if l.kind != LogStoreWAL {
		t.Fatalf("reopened as %q", l.kind)
	}
	first, _ := l.store.FirstIndex()
	last, _ := l.store.LastIndex()
	if first != 1 || last != 100 {
		t.Fatalf("log %d..%d, want 1..100", first, last)
	}
	for i := uint64(1); i <= 100; i++ {
		var e raft.Log
		if err := l.store.GetLog(i, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", i) {
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
	dir := t.TempDir()
	stable := openStable(t, dir)
	defer stable.Close()
	for _, tc := range []struct {
		kind LogStore
		want bool
	}{{LogStoreWAL, true}, {LogStoreBolt, false}} {
		l, err := openLogStore(dir, tc.kind, stable, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		timed := newTimedLogStore(l.store, l.diskTime)
		chunked := newChunkedLogStore(timed, compactChunk)
		for name, under := range map[string]raft.LogStore{
			"timed":         timed,
			"chunked":       chunked,
			"space/timed":   &spaceLogStore{LogStore: timed},
			"space/chunked": &spaceLogStore{LogStore: chunked},
		} {
			cache, err := raft.NewLogCache(logCacheSize, under)
			if err != nil {
				t.Fatal(err)
			}
			if got := cache.IsMonotonic(); got != tc.want {
				t.Errorf("%s: cache over %s store: IsMonotonic %v, want %v", tc.kind, name, got, tc.want)
			}
		}
		if l.close != nil {
			if err := l.close(); err != nil {
				t.Fatal(err)
			}
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
	stable := openStable(t, dir)
	defer stable.Close()
	l, err := openLogStore(dir, LogStoreWAL, stable, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.store.StoreLogs(testLogs(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := l.store.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	if err := l.store.StoreLogs(testLogs(9, 12)); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l, err = openLogStore(dir, LogStoreAuto, stable, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if last, err := l.store.LastIndex(); err != nil || last != 12 {
		t.Fatalf("last index %d (%v), want 12", last, err)
	}
	for i := uint64(1); i <= 12; i++ {
		var e raft.Log
		if err := l.store.GetLog(i, &e); err != nil || string(e.Data) != fmt.Sprintf("entry %d", i) {
			t.Fatalf("after a restart, entry %d: %q (%v)", i, e.Data, err)
		}
	}
}
