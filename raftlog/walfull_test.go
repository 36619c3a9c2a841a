//go:build linux

package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/test/harness"
)

// TestWALRecoversFromFullDisk: a wal whose disk is (all but) full takes
// appends while its preallocated segment has room; the rotation to the
// next segment fails (raft-wal cannot preallocate it, on its rotation
// goroutine), then appends fail, with ENOSPC, every one while
// the disk stays full, with the log still readable. Once space is freed
// the next append succeeds, without reopening the store from outside, and
// every entry appended reads back, also after a restart. Before the
// store reopened itself, raft-wal answered every append after the failed
// rotation with "segment is sealed" until the process restarted.
func TestWALRecoversFromFullDisk(t *testing.T) {
	for _, free := range []int64{256 << 10, 0} {
		t.Run(fmt.Sprintf("free=%dKiB", free>>10), func(t *testing.T) { walFullDisk(t, free) })
	}
}

// walFullDisk runs TestWALRecoversFromFullDisk with free bytes left on
// the disk: with none, the append that crosses the end of the
// preallocated segment fails itself, part written.
func walFullDisk(t *testing.T, free int64) {
	disk := harness.SmallTmpfs(t, 8, nil)
	dir := filepath.Join(disk, WALDir)
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	const segSize = 1 << 20
	w, err := openWALSized(dir, hclog.NewNullLogger(), segSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	// Full but for 256 KiB: the append that fills the segment (and its
	// index) fits, the next 1 MiB segment does not. Full to the last
	// block: the append that crosses the end of the segment fails.
	ballast := filepath.Join(disk, "ballast")
	harness.FillDisk(t, ballast)
	fi, err := os.Stat(ballast)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(ballast, fi.Size()-free); err != nil {
		t.Fatal(err)
	}

	entry := func(i uint64) *raft.Log {
		d := make([]byte, 16<<10)
		copy(d, fmt.Sprintf("entry %d", i))
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: d}
	}
	next := uint64(1)
	var firstErr error
	for ; firstErr == nil; next++ {
		if next > 4*segSize/(16<<10) {
			t.Fatalf("%d entries of 16 KiB appended on a full disk with 1 MiB segments", next)
		}
		firstErr = w.StoreLogs([]*raft.Log{entry(next)})
	}
	next-- // the entry that failed
	if !errors.Is(firstErr, syscall.ENOSPC) {
		t.Fatalf("the first append to fail: want ENOSPC, got %v", firstErr)
	}
	if next < segSize/(16<<10)/2 {
		t.Fatalf("the first append to fail was entry %d: the preallocated segment should have taken more", next)
	}
	t.Logf("appends failed from entry %d: %v", next, firstErr)
	// While the disk is full, appends keep failing, for lack of space,
	// and what was appended reads back.
	for range 3 {
		err := w.StoreLogs([]*raft.Log{entry(next)})
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append on a full disk: want ENOSPC, got %v", err)
		}
	}
	var e raft.Log
	if err := w.GetLog(next-1, &e); err != nil || e.Index != next-1 {
		t.Fatalf("read entry %d on a full disk: index %d, %v", next-1, e.Index, err)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(3 * segSize / (16 << 10)) { // across two more rotations
		if err := w.StoreLogs([]*raft.Log{entry(next + i)}); err != nil {
			t.Fatalf("append %d after space was freed: %v", next+i, err)
		}
	}
	last := next + 3*segSize/(16<<10) - 1
	check := func(when string) {
		t.Helper()
		if got, err := w.LastIndex(); err != nil || got != last {
			t.Fatalf("%s: last index %d (%v), want %d", when, got, err, last)
		}
		for i := uint64(1); i <= last; i++ {
			var e raft.Log
			if err := w.GetLog(i, &e); err != nil || string(e.Data[:len(fmt.Sprintf("entry %d", i))]) != fmt.Sprintf("entry %d", i) {
				t.Fatalf("%s: entry %d: %v", when, i, err)
			}
		}
	}
	check("after space returned")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w, err = openWALSized(dir, hclog.NewNullLogger(), segSize); err != nil {
		t.Fatal(err)
	}
	check("after a restart")
}
