package cluster

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/test/harness"
)

// TestRestartRestoresNewestOnce: a restarted node restores the newest
// snapshot once (its own start-up restore; Raft does not restore again)
// and replays the log after it. With the newest snapshot's state file
// damaged, that restore fails on the CRC, which is found only at the end
// of the read, and the node comes back from the older snapshot and the log
// instead, with nothing of the damaged file in its state.
func TestRestartRestoresNewestOnce(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	cfg := testConfig(t, "solo", dir, 1)
	n := startNode(t, cfg)
	if _, err := n.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	apply := func(n *testNode, cmds ...string) {
		t.Helper()
		for _, c := range cmds {
			if _, err := n.Apply(ctxTimeout(t, 5*time.Second), []byte(c)); err != nil {
				t.Fatalf("apply %s: %v", c, err)
			}
		}
	}
	apply(n, "a", "b", "c")
	if _, err := n.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	apply(n, "d")
	if _, err := n.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	apply(n, "e")
	shutdown(t, n)
	want := []string{"a", "b", "c", "d", "e"}

	r := startNode(t, cfg)
	if _, err := r.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("no leader after restart: %v", err)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("state recovered", func() bool { return slices.Equal(r.fsm.Entries(), want) }))
	if got := r.fsm.restores.Load(); got != 1 {
		t.Fatalf("restored %d times, want once", got)
	}
	shutdown(t, r)

	store, err := raft.NewFileSnapshotStore(cfg.DataDir, raftgroup.SnapshotsRetained, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := store.List()
	if err != nil || len(metas) != 2 {
		t.Fatalf("snapshots: %d, %v; want 2", len(metas), err)
	}
	// Damage the newest state file so that it still parses: a JSON list
	// of other entries of the same length, which only the CRC can catch.
	state := filepath.Join(cfg.DataDir, "snapshots", metas[0].ID, "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"d"`))
	if i < 0 {
		t.Fatalf("newest snapshot %q lacks d", b)
	}
	b[i+1] = 'X'
	if err := os.WriteFile(state, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := startNode(t, cfg)
	if _, err := r2.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("no leader after restart on a damaged snapshot: %v", err)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("state recovered from the older snapshot", func() bool { return slices.Equal(r2.fsm.Entries(), want) }))
	// The damaged one is out of the store (a leader would otherwise send
	// it, and fail), kept for a post-mortem; nothing else is corrupt.
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "corrupt-snapshots", metas[0].ID, "state.bin")); err != nil {
		t.Errorf("the damaged snapshot was not set aside: %v", err)
	}
	if c := r2.Corrupt(); c != nil {
		t.Errorf("quarantined although the older snapshot and the log cover the damaged one: %v", c)
	}
	shutdown(t, r2)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}
