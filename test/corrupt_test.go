package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestCorruptNodeRepairedFromPeers: one node of three has its wal segment
// and its newest snapshot damaged (bits flipped, a range zeroed, the file
// cut short), once while it is stopped and once while it runs (then it is
// killed and restarted). Each time it finds the damage at start, logs it
// naming the file, shows as corrupt, is removed by the leader, sets its
// state aside and rejoins with the leader's; the cluster takes writes
// throughout, and every acknowledged enqueue is consumed in the end.
// Before, the node started on a log raft-wal had silently cut short (or
// crashed on it), and could elect a leader without entries it had
// acknowledged.
func TestCorruptNodeRepairedFromPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	nodes, c := startCluster(t, 3)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "intact", &raftqv1.QueueConfig{VisibilityTimeoutMs: 20_000}); err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, c, "intact", 2)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	waitEnqueued := func(n int64) {
		t.Helper()
		harness.Eventually(t, 90*time.Second, func() error {
			if got := w.enqueued.Load(); got < n {
				return fmt.Errorf("%d enqueued, want %d (last error: %v)", got, n, w.lastErr.Load())
			}
			return nil
		})
	}
	waitEnqueued(400)

	for round, running := range []bool{false, true} {
		leader := leaderOf(t, nodes)
		var bad *harness.Node
		for _, n := range nodes {
			if n != leader {
				bad = n
				break
			}
		}
		// A snapshot of its own to damage (raft takes them only every
		// couple of minutes).
		if _, err := raftqv1.NewClusterClient(rawConn(t, bad)).Snapshot(ctx, &raftqv1.SnapshotRequest{}); err != nil {
			t.Fatal(err)
		}
		seg, snap := harness.NewestSegment(bad.DataDir), harness.NewestSnapshotState(bad.DataDir)
		if seg == "" || snap == "" {
			t.Fatalf("round %d: %s has segment %q, snapshot %q; want both", round, bad.ID, seg, snap)
		}
		if !running {
			if err := bad.Stop(20 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{seg, snap} {
			did, err := harness.Damage(f, harness.DamageKinds[rng.IntN(len(harness.DamageKinds))], rng)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d (running: %v): %s", round, running, did)
		}
		before := w.enqueued.Load()
		if running {
			bad.Kill()
		}
		damagedAt := time.Now()
		bad.Start()
		// It finds the damage, says where, and is rebuilt (its state set
		// aside in diverged-N) while the others take writes.
		harness.Eventually(t, 60*time.Second, func() error {
			if !strings.Contains(bad.Log(), "this node's Raft state is corrupt") {
				return fmt.Errorf("%s has not reported corrupt state; log tail:\n%s", bad.ID, bad.LogTail(20))
			}
			return nil
		})
		if l := bad.Log(); !strings.Contains(l, filepath.Base(seg)) && !strings.Contains(l, filepath.Base(filepath.Dir(snap))) {
			t.Errorf("the report names neither %s nor %s", seg, snap)
		}
		harness.Eventually(t, 120*time.Second, func() error {
			if _, err := os.Stat(filepath.Join(bad.DataDir, fmt.Sprintf("diverged-%d", round+1))); err != nil {
				return fmt.Errorf("%s's state not set aside yet: %v", bad.ID, err)
			}
			return nil
		})
		repairedAt := time.Now()
		waitVoters(t, c, leader, 3)
		harness.Eventually(t, 120*time.Second, func() error {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			st, err := statusOf(sctx, t, leader)
			if err != nil {
				return err
			}
			for _, n := range st.Nodes {
				if n.Id == bad.ID && (n.Suffrage != "voter" || !n.Healthy || n.Corrupt != "") {
					return fmt.Errorf("%s: %v", bad.ID, n)
				}
			}
			return nil
		})
		t.Logf("round %d: %s set aside its damaged state %v after its start, back as a healthy voter %v after",
			round, bad.ID, repairedAt.Sub(damagedAt).Round(time.Millisecond), time.Since(damagedAt).Round(time.Millisecond))
		if w.enqueued.Load() <= before {
			t.Errorf("round %d: no enqueue acknowledged while %s was repaired", round, bad.ID)
		}
		waitEnqueued(w.enqueued.Load() + 100)
	}
	w.stopProducers()
	harness.Eventually(t, 120*time.Second, func() error {
		w.consumersOK(t)
		if m := w.missing(); len(m) > 0 {
			return fmt.Errorf("%d acknowledged messages not consumed (e.g. %s)", len(m), m[0])
		}
		return nil
	})
	w.stopConsumers()
	w.consumersOK(t)
	verifyConsistent(t, c, 3)
}
