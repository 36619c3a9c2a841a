package cluster

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/internal/damage"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
	"github.com/raftq/raftq/test/harness"
)

// TestNodeQuarantinesCorruptState: a node restarted on a data dir whose
// wal segment or newest snapshot was damaged while it was stopped does
// not take part in Raft (before: it started on the damaged log, which
// raft-wal had silently cut short, or crashed applying it), says so in
// its status and gossip, and records it so that every later start does
// too, until its state is wiped for repair.
func TestNodeQuarantinesCorruptState(t *testing.T) {
	for _, target := range []string{"wal", "snapshot"} {
		t.Run(target, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(t, "solo", dir, 1)
			n := startNode(t, cfg)
			if _, err := n.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			for i := range 200 {
				if _, err := n.Apply(ctxTimeout(t, 5*time.Second), bytes.Repeat([]byte{byte(i)}, 300)); err != nil {
					t.Fatal(err)
				}
				if i == 100 {
					if _, err := n.Snapshot(ctxTimeout(t, 5*time.Second)); err != nil {
						t.Fatal(err)
					}
				}
			}
			shutdown(t, n)

			var file string
			switch target {
			case "wal":
				files, _ := filepath.Glob(filepath.Join(cfg.DataDir, raftlog.WALDir, "*.wal"))
				sort.Strings(files)
				file = files[len(files)-1]
				damage.ZeroRange(t, file, segmentEnd(t, file)/3, 500)
			case "snapshot":
				files, _ := filepath.Glob(filepath.Join(cfg.DataDir, "snapshots", "*", "state.bin"))
				if len(files) != 1 {
					t.Fatalf("snapshots: %v", files)
				}
				file = files[0]
				fi, _ := os.Stat(file)
				damage.FlipBit(t, file, fi.Size()/2)
			}

			for restart := range 2 {
				n = startNode(t, cfg)
				c := n.Corrupt()
				if c == nil || !n.Quarantined() {
					shutdown(t, n)
					t.Fatalf("start %d on damaged %s: not quarantined", restart, file)
				}
				if restart == 0 && c.File != file {
					t.Errorf("corruption names %s, want %s", c.File, file)
				}
				select {
				case <-n.CorruptFound():
				default:
					t.Error("CorruptFound not closed on a quarantined start")
				}
				st := n.Status()
				if len(st.Nodes) != 1 || st.Nodes[0].State != "corrupt" || st.Nodes[0].Healthy || !strings.Contains(st.Nodes[0].CorruptReason, filepath.Base(file)) {
					t.Errorf("status = %+v", st)
				}
				// It must never lead (nor serve what it holds).
				if li, err := n.WaitLeader(ctxTimeout(t, 3*testHeartbeat)); err == nil {
					t.Errorf("a quarantined node elected %+v", li)
				}
				if _, err := n.Apply(ctxTimeout(t, time.Second), []byte("x")); err == nil {
					t.Error("a quarantined node applied a command")
				}
				shutdown(t, n)
			}
			// The repair path sets the state aside, marker included: the
			// next start is a new member with no state.
			if err := raftgroup.RequestWipe(cfg.DataDir, "test repair"); err != nil {
				t.Fatal(err)
			}
			n = startNode(t, cfg)
			defer shutdown(t, n)
			if n.Corrupt() != nil || n.Quarantined() {
				t.Fatalf("still corrupt after the wipe: %v", n.Corrupt())
			}
		})
	}
}

// TestRunningLeaderFindsCorruptLog: the leader's wal is damaged under it
// while it runs; a follower that was away needs those entries, and the
// leader's read of them (not in its cache) finds the damage: it stops Raft
// at once (no vote, no append from corrupt state: before, raft-wal handed
// the changed bytes to the follower as the entries), records the damage
// for its next start, and the other two elect a leader and go on.
func TestRunningLeaderFindsCorruptLog(t *testing.T) {
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	cfgs := map[string]nodeConfig{}
	for _, id := range []string{"n1", "n2", "n3"} {
		cfgs[id] = testConfig(t, id, c.dir, 3)
		c.seeds = append(c.seeds, cfgs[id].GossipBind)
	}
	defer c.shutdownAll()
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(cfgs[id])
	}
	c.waitVoters(15*time.Second, "n1", "n2", "n3")
	l := c.leader()
	away := c.follower()
	if _, err := l.Apply(ctxTimeout(t, 5*time.Second), []byte("before")); err != nil {
		t.Fatal(err)
	}
	crash(t, away)
	// More than the log cache holds, so the leader reads them from disk.
	for i := range 3 * raftgroup.LogCacheSize {
		if _, err := l.Apply(ctxTimeout(t, 5*time.Second), bytes.Repeat([]byte{byte(i)}, 300)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(l.cfg.DataDir, raftlog.WALDir, "*.wal"))
	sort.Strings(files)
	tail := files[len(files)-1]
	end := segmentEnd(t, tail)
	for off := end / 10; off < end/2; off += 1000 {
		damage.FlipBit(t, tail, off)
	}
	start := time.Now()
	c.start(cfgs[away.ID()])
	harness.Eventually(t, 20*time.Second, harness.Holds("the leader finding its damaged log", func() bool { return l.Corrupt() != nil }))
	t.Logf("found %v after %v", l.Corrupt(), time.Since(start))
	if cr := l.Corrupt(); cr.File != filepath.Join(l.cfg.DataDir, raftlog.WALDir) || cr.Index == 0 {
		t.Errorf("corruption = %+v; want the wal and an index", cr)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("raft stopped on the damaged node", func() bool { return l.Raft().State() == raft.Shutdown }))
	if m, err := raftgroup.RecordedCorruption(l.cfg.DataDir); err != nil || m == nil {
		t.Errorf("marker: %v, %v; want the damage recorded for the next start", m, err)
	}
	shutdown(t, l)
	// raftgroup.Leadership may change hands once more while the node that was
	// away catches up: an apply that lost it is tried on the next leader.
	var nl *testNode
	harness.Eventually(t, 30*time.Second, harness.Holds("the other two committing", func() bool {
		nl = c.leader()
		_, err := nl.Apply(ctxTimeout(t, 5*time.Second), []byte("after"))
		return err == nil && nl != l
	}))
	harness.Eventually(t, 20*time.Second, harness.Holds("the follower that was away caught up from the new leader", func() bool {
		return c.nodes[away.ID()].AppliedIndex() >= nl.AppliedIndex()
	}))
	// Restarted, it stays out until repaired.
	r := startNode(t, l.cfg)
	defer shutdown(t, r)
	if !r.Quarantined() {
		t.Fatal("restarted without quarantine")
	}
}

// segmentEnd is where the committed frames of a wal segment file end.
func segmentEnd(t *testing.T, path string) int64 {
	t.Helper()
	end, err := raftlog.SegmentEnd(path)
	if err != nil {
		t.Fatal(err)
	}
	return end
}
