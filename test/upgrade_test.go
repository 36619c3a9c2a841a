package test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// upgradeFrom is the first commit of this repository with a versioned log
// ("fsm: own, versioned log format; cluster version; ..."): the oldest
// build a rolling upgrade must start from. Its `serve` takes every flag
// the harness passes (--node-id, --data-dir, the four addresses, --join,
// --bootstrap-expect, --lease-grace). Its nodes advertise no log version
// in gossip (that came later), which counts as version 1.
const upgradeFrom = "0ab67c76155cc4b6fba184edf1501c230abb99a6"

// TestRollingUpgrade builds upgradeFrom from the repository's history,
// runs a three-node cluster of it under a continuous enqueue/consume
// load, and upgrades it to this build one node at a time: stop
// (SIGTERM), swap the binary, start on the same data dir, wait until the
// node has caught up. While any voter runs the old build the cluster
// stays at log version 1 (an old node would stop at a newer entry, and
// none does); after the last node it rises to this build's. Nothing
// acknowledged is lost, nothing is held twice, and the replicas agree.
// Then the old build, started again on an upgraded node's data dir, stops
// with a clear message rather than apply entries it does not know.
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier raftq and upgrades a three-node cluster")
	}
	began := time.Now()
	oldBin := buildOld(t, upgradeFrom, "the version to upgrade from")

	nodes := make([]*harness.Node, 3)
	for i := range nodes {
		nodes[i] = harness.TestNode(t, oldBin, fmt.Sprintf("n%d", i+1))
	}
	flags := append(harness.JoinFlags(nodes), "--lease-grace", "2s")
	for _, n := range nodes {
		n.Args = append(n.Args, flags...)
		n.Start()
	}
	c := harness.Dial(t, nodes...)
	ctx := ctxT(t)
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, c, nodes[0], 3)
	if _, err := c.CreateQueue(ctx, "up", &raftqv1.QueueConfig{VisibilityTimeoutMs: 20_000}); err != nil {
		t.Fatal(err)
	}

	w := startWorkload(t, c, "up", 2)
	w.progress(t, "on the old build", 200)

	order := upgradeOrder(t, nodes)
	for i, n := range order {
		upgradeNode(t, c, nodes, n)
		w.progress(t, "after upgrading "+n.ID, 100)
		if i < len(order)-1 {
			// An old voter remains: nothing newer than version 1 may be
			// proposed, so the new node reports cluster version 1.
			if v := clusterVersionAt(t, n); v != 1 {
				t.Fatalf("cluster version %d with %d old voters left; want 1", v, len(order)-1-i)
			}
			// Nor is a cluster id established: an old build could not
			// present it, and would not be admitted back after a repair.
			if id := statusAt(t, n).ClusterId; id != "" {
				t.Fatalf("cluster id %s established with %d old voters left", id, len(order)-1-i)
			}
		}
		t.Logf("upgraded %s (%d of %d) at %v, %d enqueues acknowledged so far", n.ID, i+1, len(order),
			time.Since(began).Round(time.Second), w.enqueued.Load())
	}

	// Each upgraded data dir kept its bolt log, whatever this build's
	// default log store: raft.db is still bolt's, and there is no wal.
	for _, n := range nodes {
		if _, err := os.Stat(filepath.Join(n.DataDir, "wal")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s's upgraded data dir has a wal (%v): its bolt log must stay where it is", n.ID, err)
		}
		if head, err := os.ReadFile(filepath.Join(n.DataDir, "raft.db")); err != nil || strings.HasPrefix(string(head), "raftq-wal-data-dir") {
			t.Fatalf("%s's upgraded data dir: raft.db is no longer bolt's (%v)", n.ID, err)
		}
	}

	// Every voter runs this build: the cluster version rises to what it
	// applies, as each node advertises.
	harness.Eventually(t, 30*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := c.ClusterStatus(cctx)
		if err != nil {
			return err
		}
		for _, nd := range st.Nodes {
			if nd.MaxLogVersion <= 1 || nd.MaxLogVersion != st.Nodes[0].MaxLogVersion {
				return fmt.Errorf("node %s advertises log version %d", nd.Id, nd.MaxLogVersion)
			}
		}
		if want := st.Nodes[0].MaxLogVersion; st.ClusterVersion != want {
			return fmt.Errorf("cluster version %d, want %d", st.ClusterVersion, want)
		}
		return nil
	})
	w.progress(t, "at the new cluster version", 100)

	// Every server runs a build with cluster ids: the leader establishes
	// one, every node takes it and records it in its data dir.
	harness.Eventually(t, 30*time.Second, func() error {
		want := statusAt(t, nodes[0]).ClusterId
		for _, n := range nodes {
			got := statusAt(t, n).ClusterId
			if got == "" || got != want {
				return fmt.Errorf("%s reports cluster id %q, %s %q", n.ID, got, nodes[0].ID, want)
			}
			if rec, err := os.ReadFile(filepath.Join(n.DataDir, "cluster-id")); err != nil || strings.TrimSpace(string(rec)) != want {
				return fmt.Errorf("%s's data dir records cluster id %q (%v), want %q", n.ID, rec, err, want)
			}
		}
		return nil
	})

	w.drain(t)
	verifyConsistent(t, c, 3)
	appliedEverything(t, nodes)
	t.Logf("%d enqueues acknowledged over the upgrade, every one consumed", w.enqueued.Load())

	// Going back is refused: the old build, started on a node's data dir
	// now holding entries of the new log version, stops with a message
	// that says what to do instead of applying them. The node then comes
	// back on this build and catches up.
	back := order[0]
	if err := back.Stop(harness.StopTimeout); err != nil {
		t.Fatal(err)
	}
	tail := runUntilExit(t, back, oldBin)
	if !strings.Contains(tail, "this build applies versions up to") || !strings.Contains(tail, "upgrade this node's raftq binary") {
		t.Fatalf("the old build on %s's upgraded data dir stopped without saying why:\n%s", back.ID, tail[max(0, len(tail)-4000):])
	}
	back.SetBin(binary)
	back.Start()
	waitCaughtUp(t, c, nodes, back)
	verifyConsistent(t, c, 3)
}

// progress waits until n more enqueues of the workload are acknowledged.
func (r *runningWorkload) progress(t *testing.T, what string, n int64) {
	t.Helper()
	from := r.enqueued.Load()
	harness.Eventually(t, 60*time.Second, func() error {
		if got := r.enqueued.Load() - from; got < n {
			return fmt.Errorf("%s: %d enqueues acknowledged, want %d (last error: %v)", what, got, n, r.lastErr.Load())
		}
		return nil
	})
}

// drain stops the producers, waits until every acknowledged enqueue has
// been consumed and stops the consumers; none may have given up (a
// consumer gives up only on errors retrying cannot fix) nor held a
// message another held.
func (r *runningWorkload) drain(t *testing.T) {
	t.Helper()
	r.stopProducers()
	r.consumersOK(t)
	harness.Eventually(t, 90*time.Second, func() error {
		r.consumersOK(t)
		if m := r.missing(); len(m) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			qi, err := r.c.GetQueue(ctx, r.queue, false)
			return fmt.Errorf("%d acknowledged messages not yet consumed (e.g. %s); queue %v %v", len(m), m[0], qi.GetStats(), err)
		}
		return nil
	})
	r.stopConsumers()
	r.consumersOK(t)
	if len(r.overlap) > 0 {
		t.Fatalf("messages held by two consumers at once: %v", r.overlap)
	}
}

// upgradeOrder is the order a rolling upgrade takes: followers first, the
// leader last (the usual order: one election).
func upgradeOrder(t *testing.T, nodes []*harness.Node) []*harness.Node {
	t.Helper()
	leader := leaderOf(t, nodes)
	var order []*harness.Node
	for _, n := range nodes {
		if n != leader {
			order = append(order, n)
		}
	}
	return append(order, leader)
}

// upgradeNode upgrades n to this build while the others run: stop
// (SIGTERM), swap the binary, start on the same data dir, wait until it
// has caught up.
func upgradeNode(t *testing.T, c *client.Client, nodes []*harness.Node, n *harness.Node) {
	t.Helper()
	for _, m := range nodes {
		if !m.Running() {
			t.Fatalf("%s is not running before %s is upgraded:\n%s", m.ID, n.ID, m.LogTail(4000))
		}
	}
	if err := n.Stop(harness.StopTimeout); err != nil {
		t.Fatal(err)
	}
	n.SetBin(binary)
	n.Start()
	waitCaughtUp(t, c, nodes, n)
}

// appliedEverything fails t if a node met an entry or snapshot it could
// not apply.
func appliedEverything(t *testing.T, nodes []*harness.Node) {
	t.Helper()
	for _, n := range nodes {
		if strings.Contains(n.Log(), "this build applies versions up to") {
			t.Fatalf("%s met an entry or snapshot it could not apply:\n%s", n.ID, n.LogTail(4000))
		}
	}
}

// buildOld builds rev (what names it for a skip) and returns the
// binary; the test is skipped where the history is not at hand.
func buildOld(t *testing.T, rev, what string) string {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bin, err := harness.BuildRevision(ctx, t.TempDir(), rev)
	cancel()
	if errors.Is(err, harness.ErrNoHistory) {
		t.Skipf("cannot build %s: %v", what, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %v", rev[:12], time.Since(began).Round(time.Second))
	return bin
}

// runUntilExit starts n's data dir on bin, an older build expected to
// refuse it, waits until the process has stopped and returns what it
// logged.
func runUntilExit(t *testing.T, n *harness.Node, bin string) string {
	t.Helper()
	mark := len(n.Log())
	n.SetBin(bin)
	n.Start()
	harness.Eventually(t, 60*time.Second, func() error {
		if n.Running() {
			return fmt.Errorf("the old build still runs on %s's data dir", n.ID)
		}
		return nil
	})
	return n.Log()[mark:]
}

// waitCaughtUp waits until n is a voter again, healthy in the leader's
// view, and has applied what the leader had committed when n came back.
func waitCaughtUp(t *testing.T, c *client.Client, nodes []*harness.Node, n *harness.Node) {
	t.Helper()
	var target uint64
	harness.Eventually(t, 60*time.Second, func() error {
		leader := leaderOf(t, nodes)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := statusOf(ctx, t, leader)
		if err != nil {
			return err
		}
		if target == 0 {
			target = st.CommitIndex
		}
		found := false
		for _, nd := range st.Nodes {
			if nd.Id == n.ID {
				found = nd.Suffrage == "voter" && nd.Healthy
			}
		}
		if !found {
			return fmt.Errorf("%s is not a healthy voter in %s's view: %v", n.ID, leader.ID, st.Nodes)
		}
		own, err := statusOf(ctx, t, n)
		if err != nil {
			return err
		}
		if own.AppliedIndex < target {
			return fmt.Errorf("%s applied %d, the leader had committed %d", n.ID, own.AppliedIndex, target)
		}
		return nil
	})
}

// clusterVersionAt is the cluster version as node n (of this build) sees it.
// statusAt is n's own Status (local only).
func statusAt(t *testing.T, n *harness.Node) *raftqv1.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := raftqv1.NewClusterClient(rawConn(t, n)).Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func clusterVersionAt(t *testing.T, n *harness.Node) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := raftqv1.NewClusterClient(rawConn(t, n)).Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return st.ClusterVersion
}
