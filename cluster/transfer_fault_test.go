//go:build raftqfault

package cluster

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
)

// A transfer whose target wins only after hashicorp/raft's one election
// timeout (a loaded machine: a fresh-clone CI run failed TestCluster's
// transfer step with "leadership transfer timeout") still moves
// leadership to the target and answers with it. The target's writes are
// held, as a process too slow to answer: it gets TimeoutNow but its
// answer and its vote requests wait, so the first attempt times out; the
// hold ends once that first attempt has timed out.
func TestTransferLeadershipOutlastsASlowTarget(t *testing.T) {
	base := runtime.NumGoroutine()
	c := threeVoters(t, 15*time.Second, func(*nodeConfig) {})
	old := c.leader()
	target := c.follower()
	harness.Eventually(t, 10*time.Second, harness.Holds("the target caught up", func() bool {
		return target.AppliedIndex() >= old.AppliedIndex()
	}))

	target.mux.Hold(raftmux.Writes)
	type answer struct {
		id  string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		id, err := old.TransferLeadership(ctxTimeout(t, 20*time.Second), target.ID())
		done <- answer{id, err}
	}()
	var got answer
	returned := false
	harness.Eventually(t, 20*time.Second, harness.Holds("the first transfer attempt timed out, or the call returned", func() bool {
		select {
		case got = <-done:
			returned = true
			return true
		default:
			return old.Faults().TransferTimeouts() >= 1
		}
	}))
	target.mux.Release(raftmux.Writes)
	if !returned {
		got = <-done
	}
	if got.err != nil || got.id != target.ID() {
		t.Fatalf("transfer to a slow %s: %q, %v", target.ID(), got.id, got.err)
	}
	if l := c.leader(); l.ID() != target.ID() {
		t.Fatalf("leader %s after the transfer, want %s", l.ID(), target.ID())
	}
	c.shutdownAll()
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// A leader that loses its quorum in the middle of a transfer (the others
// stop answering, as when a cluster shuts down around it) steps down, and
// raft answers the transfer as done. Nobody takes over: the node says so
// once it campaigns again itself, instead of waiting out its deadline for
// a leader that cannot come (every shutdown of the last two nodes of a
// cluster waited 5 s that way). The election timeout is long so that the
// step-down (a lease timeout) comes before raft's own transfer timeout.
func TestTransferLeadershipWithoutQuorumSaysNobodyTookOver(t *testing.T) {
	base := runtime.NumGoroutine()
	c := threeVoters(t, 30*time.Second, func(cfg *nodeConfig) { cfg.ElectionTimeout = 4 * time.Second })
	l := c.leader()
	var others []*testNode
	for _, n := range c.alive() {
		if n != l {
			others = append(others, n)
		}
	}
	for _, n := range others {
		n.mux.Hold(raftmux.AllTraffic)
	}
	_, err := l.TransferLeadership(ctxTimeout(t, time.Minute), others[0].ID())
	for _, n := range others {
		n.mux.Release(raftmux.AllTraffic)
	}
	if !errors.Is(err, raftgroup.ErrNoTakeover) {
		t.Fatalf("transfer from a leader that lost its quorum: %v; want %v", err, raftgroup.ErrNoTakeover)
	}
	c.leader() // the cluster elects a leader again once the hold ends
	c.shutdownAll()
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// threeVoters starts n1, n2 and n3 (bootstrap-expect 3), each config
// changed by tweak, and waits up to within for all three to be voters.
func threeVoters(t *testing.T, within time.Duration, tweak func(*nodeConfig)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	var cfgs []nodeConfig
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := testConfig(t, id, c.dir, 3)
		tweak(&cfg)
		cfgs = append(cfgs, cfg)
		c.seeds = append(c.seeds, cfg.GossipBind)
	}
	for _, cfg := range cfgs {
		c.start(cfg)
	}
	c.waitVoters(within, "n1", "n2", "n3")
	return c
}
