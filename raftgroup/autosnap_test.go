package raftgroup

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// TestSnapshotDecision: the policy of the automatic snapshots, case by
// case (threshold 100, interval 2 minutes).
func TestSnapshotDecision(t *testing.T) {
	const th = 100
	const iv = 2 * time.Minute
	for _, tc := range []struct {
		name                    string
		applied, stored, newest uint64
		sinceLast               time.Duration
		want                    snapshotDecision
	}{
		{"below the threshold", 1090, 1099, 1000, -1, snapshotDecision{}},
		{"at the threshold, none taken by this process", 1100, 1101, 1000, -1, snapshotDecision{now: true}},
		{"past it, the last one an interval ago", 5000, 5010, 1000, iv, snapshotDecision{now: true}},
		{"past it, the last one too recent", 5000, 5010, 1000, 30 * time.Second, snapshotDecision{again: 90 * time.Second}},
		{"appended but not applied yet", 1050, 1200, 1000, -1, snapshotDecision{again: snapshotRecheck}},
		{"a restarted node still applying its log", 1500, 9000, 1000, -1, snapshotDecision{again: snapshotRecheck}},
		{"an installed snapshot ahead of the log", 900, 800, 1000, -1, snapshotDecision{}},
		{"no snapshot yet", 150, 150, 0, -1, snapshotDecision{now: true}},
	} {
		if got := decide(tc.applied, tc.stored, tc.newest, th, tc.sinceLast, iv); got != tc.want {
			t.Errorf("%s: decide(applied %d, stored %d, newest %d, since last %v) = %+v, want %+v",
				tc.name, tc.applied, tc.stored, tc.newest, tc.sinceLast, got, tc.want)
		}
	}
}

// TestSnapshotGap: the wait after a snapshot is nine times what it took,
// at least a second, at most the interval.
func TestSnapshotGap(t *testing.T) {
	const iv = 2 * time.Minute
	for _, tc := range []struct{ took, want time.Duration }{
		{0, snapshotMinGap},
		{50 * time.Millisecond, snapshotMinGap},
		{2 * time.Second, 18 * time.Second},
		{14 * time.Second, iv},
		{time.Hour, iv},
	} {
		if got := snapshotGap(tc.took, iv); got != tc.want {
			t.Errorf("snapshotGap(%v, %v) = %v, want %v", tc.took, iv, got, tc.want)
		}
	}
}

// TestRestartedNodeSnapshotsPastThreshold: a node that is restarted more
// often than its SnapshotInterval still snapshots once its log holds more
// than SnapshotThreshold entries past its newest snapshot. hashicorp/raft
// checks the threshold only when a timer of one to two intervals fires,
// and starts that timer afresh in every process, so a node restarted
// every few minutes with the default 120 s never compacted its log (the
// 30-minute soak: n2's log grew from 64 to 768 MiB). The interval here is
// an hour, longer than the test: raft's timer never fires in it.
func TestRestartedNodeSnapshotsPastThreshold(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	cfg := testConfig(t, "solo", dir, 1)
	cfg.SnapshotThreshold = 64
	cfg.SnapshotInterval = time.Hour
	cfg.TrailingLogs = 16
	n := startNode(t, cfg)
	if _, err := n.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	seq := 0
	apply := func(n *testNode, count int) uint64 {
		t.Helper()
		for range count {
			seq++
			if _, err := n.Apply(ctxTimeout(t, 10*time.Second), []byte(fmt.Sprint(seq))); err != nil {
				t.Fatalf("apply %d: %v", seq, err)
			}
		}
		return n.AppliedIndex()
	}
	apply(n, 10)
	// A snapshot taken in this process: none other is due for an
	// interval, here or (before the fix) in any later process.
	first, err := n.Snapshot(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	written := apply(n, 4*int(cfg.SnapshotThreshold))
	crash(t, n) // as kill -9 does: the next process starts its timers afresh

	r := startNode(t, cfg)
	if _, err := r.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("no leader after restart: %v", err)
	}
	newest := func() uint64 {
		metas, err := r.snaps.List()
		if err != nil || len(metas) == 0 {
			return 0
		}
		return metas[0].Index
	}
	harness.Eventually(t, 60*time.Second, harness.Holds(fmt.Sprintf("a snapshot covering index %d (the newest is at %d, taken before the restart)", written, first), func() bool {
		return newest() >= written
	}))
	// And the log is compacted behind it (raft does that after the
	// snapshot is listed), and the node says it is near its snapshot.
	harness.Eventually(t, 30*time.Second, harness.Holds(fmt.Sprintf("the log compacted past the old snapshot at %d", first), func() bool {
		firstLog, err := r.logs.Store.FirstIndex()
		return err == nil && firstLog > first
	}))
	harness.Eventually(t, 30*time.Second, harness.Holds("SnapshotStats().EntriesSince below the threshold", func() bool {
		return r.SnapshotStats().EntriesSince < cfg.SnapshotThreshold
	}))
	shutdown(t, r)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// TestSnapshotWatchLongLivedNode: a node that is not restarted snapshots
// as its log reaches the threshold, and again once it is past it after
// the gap (raft's timer, an hour here, never fires), compacting its log;
// it reports how far it is past its newest snapshot.
func TestSnapshotWatchLongLivedNode(t *testing.T) {
	base := runtime.NumGoroutine()
	cfg := testConfig(t, "solo", t.TempDir(), 1)
	cfg.SnapshotThreshold = 32
	cfg.SnapshotInterval = time.Hour
	cfg.TrailingLogs = 8
	n := startNode(t, cfg)
	if _, err := n.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	apply := func(count int) {
		t.Helper()
		for i := range count {
			if _, err := n.Apply(ctxTimeout(t, 10*time.Second), []byte(fmt.Sprint(i))); err != nil {
				t.Fatalf("apply %d: %v", i, err)
			}
		}
	}
	apply(int(cfg.SnapshotThreshold) + 8)
	harness.Eventually(t, 30*time.Second, harness.Holds("the first automatic snapshot", func() bool { return n.SnapshotStats().Count >= 1 }))
	first := n.SnapshotStats().Count
	apply(3 * int(cfg.SnapshotThreshold))
	if err := n.Barrier(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, harness.Holds("another automatic snapshot, the log past the threshold again", func() bool {
		return n.SnapshotStats().Count > first
	}))
	harness.Eventually(t, 30*time.Second, harness.Holds("the log compacted to below the threshold past the newest snapshot", func() bool {
		return n.SnapshotStats().EntriesSince < cfg.SnapshotThreshold
	}))
	harness.Eventually(t, 30*time.Second, harness.Holds("the log compacted to the trailing entries behind the newest snapshot", func() bool {
		firstLog, err := n.logs.Store.FirstIndex()
		return err == nil && n.AppliedIndex()-firstLog <= cfg.SnapshotThreshold+cfg.TrailingLogs
	}))
	if st := n.SnapshotStats(); st.Failed != 0 {
		t.Errorf("%d failed snapshots", st.Failed)
	}
	shutdown(t, n)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}
