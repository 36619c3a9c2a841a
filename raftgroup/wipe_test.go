package raftgroup

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWipeIfRequested: a requested wipe moves the Raft state (and only
// it: stable store, either log store, snapshots) aside once; without a
// request nothing moves.
func TestWipeIfRequested(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"raft.db", filepath.Join("wal", "00000000000000000001-0000000000000001.wal"), "node-id", filepath.Join("snapshots", "1-2-3", "state.bin")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	if err := wipeIfRequested(dir, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err != nil {
		t.Fatalf("moved without a request: %v", err)
	}
	if err := RequestWipe(dir, "diverged at 42"); err != nil {
		t.Fatal(err)
	}
	if err := wipeIfRequested(dir, log); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"raft.db", "wal", "snapshots", wipeMarker} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", gone, err)
		}
	}
	for _, kept := range []string{"node-id", filepath.Join("diverged-1", "raft.db"), filepath.Join("diverged-1", "wal", "00000000000000000001-0000000000000001.wal"),
		filepath.Join("diverged-1", "snapshots", "1-2-3", "state.bin")} {
		if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
}

// TestWipeKeepsTheNewestTwo: each wipe sets the state aside one past the
// highest diverged-N there, and only the newest two are kept (a node
// repaired again and again filled its data dir with them in the soak).
func TestWipeKeepsTheNewestTwo(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	for round := 1; round <= 4; round++ {
		if err := os.WriteFile(filepath.Join(dir, "raft.db"), []byte(fmt.Sprint(round)), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := RequestWipe(dir, "round"); err != nil {
			t.Fatal(err)
		}
		if err := wipeIfRequested(dir, log); err != nil {
			t.Fatal(err)
		}
		got, err := divergedDirs(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := []int{round}
		if round > 1 {
			want = []int{round - 1, round}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("after wipe %d: diverged-%v, want %v", round, got, want)
		}
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("diverged-%d", round), "raft.db"))
		if err != nil || string(b) != fmt.Sprint(round) {
			t.Fatalf("diverged-%d/raft.db = %q, %v; want this round's state", round, b, err)
		}
	}
}
