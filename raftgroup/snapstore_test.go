package raftgroup

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func newTestSnapStore(t *testing.T, chunk int64) *writeBehindStore {
	t.Helper()
	dir := t.TempDir()
	fs, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return &writeBehindStore{FileSnapshotStore: fs, dir: filepath.Join(dir, "snapshots"), chunk: chunk, log: testLogger()}
}

func createSink(t *testing.T, s *writeBehindStore, index uint64) *writeBehindSink {
	t.Helper()
	sink, err := s.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	wb, ok := sink.(*writeBehindSink)
	if !ok {
		// raft's FileSnapshotStore no longer keeps its state file at
		// snapshots/<id>.tmp/state.bin: write-behind is silently off.
		t.Fatalf("Create returned %T, not the write-behind sink", sink)
	}
	return wb
}

func TestWriteBehindSink(t *testing.T) {
	const chunk = 64 << 10
	tests := []struct {
		name       string
		size       int
		writeSize  int
		wantWaited bool // some chunk was waited for before Close
	}{
		{"empty", 0, 1, false},
		{"under a chunk", chunk - 1, 4096, false},
		{"one chunk", chunk, 4096, false},
		{"many chunks, small writes", 10*chunk + 123, 1000, true},
		{"many chunks, writes larger than a chunk", 10*chunk + 123, 3*chunk + 7, true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSnapStore(t, chunk)
			sink := createSink(t, s, uint64(i+1))
			want := make([]byte, tc.size)
			for j := range want {
				want[j] = byte(j*7 + j/251)
			}
			for rest := want; len(rest) > 0; {
				n := min(len(rest), tc.writeSize)
				if got, err := sink.Write(rest[:n]); err != nil || got != n {
					t.Fatalf("Write of %d bytes = %d, %v", n, got, err)
				}
				rest = rest[n:]
				// However large the writes, no more than two chunks wait
				// for the disk (a log fsync waits behind them).
				if dirty := sink.written - sink.waited; dirty > 2*chunk {
					t.Fatalf("%d bytes written and not waited for after a write of %d, more than two chunks of %d", dirty, n, chunk)
				}
			}
			if got := sink.f != nil; !got {
				t.Fatal("write-behind was switched off while writing")
			}
			if (sink.waited > 0) != tc.wantWaited {
				t.Errorf("waited for %d bytes of writeback, want some: %v", sink.waited, tc.wantWaited)
			}
			if sink.started > int64(tc.size) || sink.waited > sink.started {
				t.Errorf("writeback started %d, waited %d, of %d bytes", sink.started, sink.waited, tc.size)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			metas, err := s.List()
			if err != nil || len(metas) != 1 {
				t.Fatalf("List = %v, %v; want one snapshot", metas, err)
			}
			meta, rc, err := s.Open(metas[0].ID) // checks the CRC
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if meta.Size != int64(tc.size) || !bytes.Equal(got, want) {
				t.Fatalf("snapshot holds %d bytes (meta %d), want the %d written", len(got), meta.Size, tc.size)
			}
		})
	}
}

func TestWriteBehindSinkCancel(t *testing.T) {
	s := newTestSnapStore(t, 4096)
	sink := createSink(t, s, 1)
	if _, err := sink.Write(make([]byte, 5*4096)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	if sink.f != nil {
		t.Error("state file left open after Cancel")
	}
	if metas, err := s.List(); err != nil || len(metas) != 0 {
		t.Fatalf("List after Cancel = %v, %v; want none", metas, err)
	}
}

// TestSnapshotStats: a closed snapshot is counted once, with its size,
// however often Close is called; a cancelled one is not.
func TestSnapshotStats(t *testing.T) {
	s := newTestSnapStore(t, 64<<10)
	s.stats = &snapshotCounter{}
	sink := createSink(t, s, 1)
	if _, err := sink.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cancelled := createSink(t, s, 2)
	if _, err := cancelled.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := cancelled.Cancel(); err != nil {
		t.Fatal(err)
	}
	if got := s.stats.get(); got.Count != 1 || got.LastBytes != 1000 || got.LastDuration < 0 {
		t.Errorf("stats = %+v, want one snapshot of 1000 bytes", got)
	}
}

// fakeLogSyncs is a log whose fsync the test starts and ends. Idle tells
// waiting of every call made while an fsync is in progress.
type fakeLogSyncs struct {
	mu      sync.Mutex
	idle    chan struct{} // nil: no fsync in progress
	waiting chan struct{}
}

func (f *fakeLogSyncs) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.idle = make(chan struct{})
}

func (f *fakeLogSyncs) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.idle)
	f.idle = nil
}

func (f *fakeLogSyncs) busy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idle != nil
}

func (f *fakeLogSyncs) Idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.waiting != nil {
		f.waiting <- struct{}{}
	}
	return f.idle
}

// TestWriteBehindStartsBetweenLogFsyncs: no chunk's writeback starts while
// a log fsync is in progress; a chunk that finds one waits until it ends
// and then goes on, and the snapshot restores byte for byte.
func TestWriteBehindStartsBetweenLogFsyncs(t *testing.T) {
	const chunk = 4096
	s := newTestSnapStore(t, chunk)
	logs := &fakeLogSyncs{waiting: make(chan struct{}, 1)}
	s.syncs = logs
	sink := createSink(t, s, 1)
	sink.syncWait = time.Hour // the fsync's end, not the bound, releases it here
	var mu sync.Mutex
	var ranges [][2]int64
	sink.startback = func(f *os.File, off, n int64) error {
		if logs.busy() {
			t.Errorf("writeback of %d+%d started during a log fsync", off, n)
		}
		mu.Lock()
		ranges = append(ranges, [2]int64{off, n})
		mu.Unlock()
		return startWriteback(f, off, n)
	}
	want := make([]byte, 3*chunk+100)
	for i := range want {
		want[i] = byte(i*13 + i/509)
	}
	if _, err := sink.Write(want[:chunk]); err != nil { // idle log: written back at once
		t.Fatal(err)
	}
	logs.begin()
	done := make(chan error, 1)
	go func() {
		_, err := sink.Write(want[chunk:])
		done <- err
	}()
	select {
	case <-logs.waiting: // the second chunk found the fsync
	case err := <-done:
		logs.end()
		t.Fatalf("Write returned (%v) during the log fsync: it did not wait for it", err)
	}
	mu.Lock()
	if len(ranges) != 1 {
		t.Errorf("%d writebacks started before the log fsync ended, want the first chunk's only", len(ranges))
	}
	mu.Unlock()
	logs.end()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	wantRanges := [][2]int64{{0, chunk}, {chunk, chunk}, {2 * chunk, chunk}}
	if !slices.Equal(ranges, wantRanges) {
		t.Errorf("writeback started for %v, want %v (a chunk at a time)", ranges, wantRanges)
	}
	// (pacedWaits is 0 or 1 here: the fsync may end between the fake's
	// Idle and the sink's look at it.)
	if sink.pacedTimeouts != 0 {
		t.Errorf("%d chunks waited out the bound", sink.pacedTimeouts)
	}
	checkSnapshot(t, s, want)
}

// TestWriteBehindLogFsyncWaitIsBounded: a log fsync that never ends (a
// stuck disk) delays each chunk by the bound, and the snapshot is still
// written whole.
func TestWriteBehindLogFsyncWaitIsBounded(t *testing.T) {
	const chunk = 4096
	s := newTestSnapStore(t, chunk)
	logs := &fakeLogSyncs{}
	s.syncs = logs
	logs.begin()
	defer logs.end()
	sink := createSink(t, s, 1)
	sink.syncWait = time.Millisecond
	want := bytes.Repeat([]byte("raftq"), 3*chunk/5+1)
	if _, err := sink.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if chunks := len(want) / chunk; sink.pacedWaits != chunks || sink.pacedTimeouts != chunks {
		t.Errorf("paced %d chunks, %d timed out; want %d of each", sink.pacedWaits, sink.pacedTimeouts, chunks)
	}
	checkSnapshot(t, s, want)
}

// checkSnapshot opens the store's one snapshot (its CRC checked) and
// compares its bytes with want.
func checkSnapshot(t *testing.T, s *writeBehindStore, want []byte) {
	t.Helper()
	metas, err := s.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("List = %v, %v; want one snapshot", metas, err)
	}
	_, rc, err := s.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("snapshot holds %d bytes, not the %d written", len(got), len(want))
	}
}
