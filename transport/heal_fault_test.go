//go:build raftqfault

package transport_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftlog"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchSuffrage records every suffrage of node id that n's configuration
// showed, in order ("" while it is not in it), polling every 5 ms (a
// joining node stays a nonvoter for at least testcluster.PromoteAfter) until the
// returned stop is called, and once more then; stop may be called more
// than once.
func watchSuffrage(n *testcluster.Node, id string) (seen func() []string, stop func()) {
	return harness.WatchChanges(5*time.Millisecond, func() string {
		got := ""
		for _, s := range n.ClusterNode().Status().Nodes {
			if s.ID == id {
				got = s.Suffrage
			}
		}
		return got
	})
}

// TestCounterAuditRepairsDrift: a counter corrupted on purpose on the
// leader is found by the audit within one rotation over the queues,
// repaired on every replica by a recount (a warning with before and
// after, and raftq_counter_repairs_total on the node it changed), and the
// replicas still agree.
func TestCounterAuditRepairsDrift(t *testing.T) {
	const budget = 2
	logs := &logBuffer{}
	c := startInproc(t, inprocOpts{nodes: 3, audit: broker.AuditConfig{Interval: 50 * time.Millisecond, Budget: budget}, logs: logs})
	c.WaitClusterVersion(fsm.RecountVersion)
	l := c.Leader()
	for _, q := range []string{"a", "b", "c"} {
		mustCreate(t, l, q, nil)
	}
	ctx := tctx(t, 10*time.Second)
	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "b", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}, {Payload: []byte("y")}}}); err != nil {
		t.Fatal(err)
	}
	c.Synced()
	queues := len(l.State().Reader().ListQueues("")) // a, b, c and their DLQs

	before := l.Host.Broker().Stats().AuditedQueues()
	if err := l.State().Integrity().InjectCounterFault("b", "ready", 5); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "the audit to repair the counter", func() error { return l.State().Integrity().Verify() })
	// The audit recounts at most budget queues a tick: the drift was found
	// within one rotation (plus the tick that was under way).
	if audited := l.Host.Broker().Stats().AuditedQueues() - before; audited > uint64(queues+budget) {
		t.Errorf("the repair came after %d queues were audited; one rotation is %d", audited, queues)
	}
	c.Digests() // replicas agree, and followers (whose counters were right) too
	onlyRepaired(t, c, l, "b")
	text := logs.String()
	for _, want := range []string{"counter audit: a queue's counters disagree", "recomputed them", "queue=b", `before="ready=7`, `after="ready=2`} {
		if !strings.Contains(text, want) {
			t.Errorf("logs lack %q:\n%s", want, text)
		}
	}
}

// TestReplicaDivergenceRepaired: a follower whose state is changed on
// purpose is found by the leader's periodic replica check, with nobody
// running cluster verify: the leader logs it and counts
// raftq_replica_divergence_total{node}, the follower learns it, reports
// raftq_replica_diverged 1, answers /readyz with 503 and exports no queue
// numbers from its state. The leader removes it (2 agreeing voters are a
// quorum of the 2 that remain) and tells it; it asks to be started again
// with its Raft state set aside, and started again (as raftq serve does)
// it joins as a new member and comes back a voter with the leader's
// digest. The cluster takes writes throughout (through the leader and the
// healthy follower; through the repaired node once it is back).
func TestReplicaDivergenceRepaired(t *testing.T) {
	logs := &logBuffer{}
	c := startInproc(t, inprocOpts{nodes: 3, replicaCheck: 100 * time.Millisecond, logs: logs})
	l := c.Leader()
	mustCreate(t, l, "q", nil)
	ctx := tctx(t, 30*time.Second)
	enqueue := func(n *testcluster.Node, payload string) {
		t.Helper()
		if _, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte(payload)}}}); err != nil {
			t.Fatalf("enqueue through %s: %v", n.ID, err)
		}
	}
	enqueue(l, "before")
	c.Synced()
	bad, good := c.Followers()[0], c.Followers()[1]
	if err := bad.State().Integrity().InjectStateFault("q"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "the replica check to find the diverged follower", func() error {
		if !bad.API().Diverged() {
			return fmt.Errorf("%s does not know it diverged", bad.ID)
		}
		return nil
	})
	if good.API().Diverged() || l.API().Diverged() {
		t.Fatal("a replica with the right state was marked diverged")
	}
	if v, _ := sample(scrapeFams(t, l), "raftq_replica_divergence_total", "node", bad.ID); v < 1 {
		t.Errorf("leader: raftq_replica_divergence_total{node=%s} = %v", bad.ID, v)
	}
	fams := scrapeFams(t, bad)
	if v, _ := sample(fams, "raftq_replica_diverged"); v != 1 {
		t.Errorf("%s: raftq_replica_diverged = %v, want 1", bad.ID, v)
	}
	if _, ok := fams["raftq_queue_messages"]; ok {
		t.Errorf("%s still exports queue numbers from a diverged state", bad.ID)
	}
	if _, ok := scrapeFams(t, good)["raftq_queue_messages"]; !ok {
		t.Errorf("%s (not diverged) exports no queue numbers", good.ID)
	}
	rec := httptest.NewRecorder()
	bad.API().HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("%s /readyz: %d, want 503", bad.ID, rec.Code)
	}
	// Writes go on (not through the diverged node: the leader may have
	// removed it for repair already, and then it knows no leader).
	enqueue(l, "after-detection")
	enqueue(good, "after-detection-2")
	if !strings.Contains(logs.String(), "replica check: a replica's state differs") {
		t.Errorf("no log line for the divergence:\n%s", logs.String())
	}
	// A report the leader's own digest does not back changes nothing.
	cp, err := l.Admin.Checkpoint(ctx, &raftqv1.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := good.Admin.ReportDivergence(ctx, &raftqv1.ReportDivergenceRequest{Index: cp.GetIndex(), Digest: "not-it"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("false report: %v %v, want FailedPrecondition", resp, err)
	}
	if good.API().Diverged() {
		t.Fatal("a false report marked a replica diverged")
	}

	// The repair: removed, told, restarted with its state set aside.
	select {
	case <-bad.API().RepairRestart():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was not asked to restart for repair:\n%s", bad.ID, logs.String())
	}
	waitUntil(t, 10*time.Second, "the diverged node out of the configuration", func() error {
		for _, n := range l.ClusterNode().Status().Nodes {
			if n.ID == bad.ID && n.Suffrage != "" {
				return fmt.Errorf("%s still a %s", bad.ID, n.Suffrage)
			}
		}
		return nil
	})
	enqueue(l, "while-away")
	enqueue(good, "while-away-2")
	seen, stopWatch := watchSuffrage(l, bad.ID)
	defer stopWatch()
	nb := c.Restart(bad)
	waitUntil(t, 30*time.Second, "the repaired node back as a voter", func() error {
		for _, n := range l.ClusterNode().Status().Nodes {
			if n.ID == nb.ID && n.Suffrage == "voter" {
				return nil
			}
		}
		return fmt.Errorf("%s not a voter yet:\n%s", nb.ID, logs.String())
	})
	stopWatch()
	// It came back as a nonvoter, and was promoted once caught up.
	if got, want := seen(), []string{"", "nonvoter", "voter"}; !slices.Equal(got, want) {
		t.Errorf("%s's suffrage in the leader's configuration went %q, want %q", nb.ID, got, want)
	}
	enqueue(nb, "after-repair")
	c.Digests() // every replica, the repaired one too, has the leader's digest
	if nb.API().Diverged() {
		t.Fatal("the repaired node still counts itself diverged")
	}
	kept := []string{"raft.db"} // the node runs the default log store
	if raftlog.DefaultLogStore == raftlog.LogStoreWAL {
		kept = append(kept, "wal")
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(nb.DataDir, "diverged-1", f)); err != nil {
			t.Errorf("the diverged Raft state was not kept aside: %v", err)
		}
	}
	if err := nb.State().Integrity().Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestCounterAuditRepairsFollowerDrift: a counter corrupted on purpose on
// a follower is not in the state digest (counters derive from the
// messages), so the replica check cannot see it and the leader's audit,
// of its own counters, finds nothing. The follower's own audit finds it
// and asks the leader to commit a recount: the follower's counters are
// repaired (a warning with before and after, raftq_counter_repairs_total
// on it alone) and the replicas still agree.
func TestCounterAuditRepairsFollowerDrift(t *testing.T) {
	logs := &logBuffer{}
	c := startInproc(t, inprocOpts{nodes: 3, audit: broker.AuditConfig{Interval: 50 * time.Millisecond, Budget: 2}, logs: logs})
	c.WaitClusterVersion(fsm.RecountVersion)
	l := c.Leader()
	for _, q := range []string{"a", "b", "c"} {
		mustCreate(t, l, q, nil)
	}
	ctx := tctx(t, 10*time.Second)
	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "b", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}, {Payload: []byte("y")}}}); err != nil {
		t.Fatal(err)
	}
	c.Synced()
	f := c.Followers()[0]
	if err := f.State().Integrity().InjectCounterFault("b", "in_flight", 3); err != nil {
		t.Fatal(err)
	}
	if err := f.State().Integrity().Verify(); err == nil {
		t.Fatal("the injected fault is not visible to Verify")
	}
	waitUntil(t, 20*time.Second, "the follower's counters repaired", func() error {
		if err := f.State().Integrity().Verify(); err != nil {
			return fmt.Errorf("%w\n%s", err, logs.String())
		}
		return nil
	})
	c.Digests()
	onlyRepaired(t, c, f, "b")
	text := logs.String()
	for _, want := range []string{"counter audit: a queue's counters disagree", "node=" + f.ID, "recomputed them", `before="ready=2 delayed=0 in_flight=3`, `after="ready=2 delayed=0 in_flight=0`} {
		if !strings.Contains(text, want) {
			t.Errorf("logs lack %q:\n%s", want, text)
		}
	}
}

// onlyRepaired checks that every node's counters verify and that only
// repaired counted a repair of queue's counters.
func onlyRepaired(t *testing.T, c *testcluster.Cluster, repaired *testcluster.Node, queue string) {
	t.Helper()
	for _, n := range c.Nodes {
		if err := n.State().Integrity().Verify(); err != nil {
			t.Errorf("%s: %v", n.ID, err)
		}
		want := 0.0
		if n == repaired {
			want = 1
		}
		got, _ := sample(scrapeFams(t, n), "raftq_counter_repairs_total", "queue", queue)
		if got != want {
			t.Errorf("%s: raftq_counter_repairs_total{queue=%s} = %v, want %v", n.ID, queue, got, want)
		}
	}
}
