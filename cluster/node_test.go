package cluster

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/test/harness"
)

func TestSingleNodeBootstrapAndRestart(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	cfg := testConfig(t, "solo", dir, 1)

	start := time.Now()
	n := startNode(t, cfg)
	li, err := n.WaitLeader(ctxTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatalf("no leader: %v", err)
	}
	t.Logf("single node elected itself in %v", time.Since(start))
	if li.ID != "solo" || li.GRPCAddr != cfg.GRPCAdvertise || li.RaftAddr != n.RaftAddr() {
		t.Fatalf("leader = %+v", li)
	}
	if got := n.boot.done.Load(); got != 1 {
		t.Fatalf("bootstraps = %d, want 1", got)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("leader service start", func() bool { return n.svc.running.Load() == 1 }))

	for i, cmd := range []string{"a", "b", "c"} {
		resp, err := n.Apply(ctxTimeout(t, 5*time.Second), []byte(cmd))
		if err != nil {
			t.Fatalf("apply %s: %v", cmd, err)
		}
		if resp != i+1 {
			t.Fatalf("apply %s: response %v, want %d", cmd, resp, i+1)
		}
	}
	idx, err := n.Snapshot(ctxTimeout(t, 5*time.Second))
	if err != nil || idx == 0 {
		t.Fatalf("snapshot: %d, %v", idx, err)
	}
	idx2, err := n.Snapshot(ctxTimeout(t, 5*time.Second))
	if err != nil || idx2 != idx {
		t.Fatalf("second snapshot with nothing new: %d, %v; want %d", idx2, err, idx)
	}
	if _, err := n.Apply(ctxTimeout(t, 5*time.Second), []byte("d")); err != nil {
		t.Fatalf("apply d: %v", err)
	}
	st := n.Status()
	if st.LeaderID != "solo" || st.LeaderAddr != cfg.GRPCAdvertise || len(st.Nodes) != 1 ||
		st.Nodes[0].State != "leader" || st.Nodes[0].Suffrage != "voter" || !st.Nodes[0].Healthy ||
		st.AppliedIndex < idx || st.Nodes[0].AppliedIndex != st.AppliedIndex {
		t.Fatalf("status = %+v", st)
	}
	changed := n.Leadership().Changed
	shutdown(t, n)
	shutdown(t, n) // idempotent
	select {
	case <-changed:
	default:
		t.Fatal("Leadership().Changed not closed by shutdown")
	}
	if l := n.Leadership(); l.Role != raftgroup.RoleShutdown || l.LeaderID != "" || l.Established {
		t.Fatalf("leadership after shutdown = %+v", l)
	}
	select {
	case <-n.Leadership().Changed:
		t.Fatal("the final leadership value's Changed is closed")
	default:
	}
	if n.svc.running.Load() != 0 || n.svc.stops.Load() != 1 {
		t.Fatalf("leader service not stopped: running %d stops %d", n.svc.running.Load(), n.svc.stops.Load())
	}
	if _, err := n.Apply(ctxTimeout(t, time.Second), []byte("x")); !errors.Is(err, raftgroup.ErrShutdown) || !errors.Is(err, raft.ErrRaftShutdown) {
		t.Fatalf("apply after shutdown: %v", err)
	}

	// Restart on the same data dir: state comes back, no second bootstrap.
	r := startNode(t, cfg)
	if _, err := r.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("no leader after restart: %v", err)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("state recovered", func() bool {
		return slices.Equal(r.fsm.Entries(), []string{"a", "b", "c", "d"})
	}))
	if got := r.boot.done.Load(); got != 0 {
		t.Fatalf("bootstrapped again after restart (%d)", got)
	}
	if !r.ms.HasState() {
		t.Fatal("restarted node does not publish has-state")
	}
	resp, err := r.Apply(ctxTimeout(t, 5*time.Second), []byte("e"))
	if err != nil || resp != 5 {
		t.Fatalf("apply after restart: %v, %v", resp, err)
	}
	shutdown(t, r)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// testCluster is a set of in-process nodes joined over loopback gossip.
type testCluster struct {
	t      *testing.T
	dir    string
	expect int
	nodes  map[string]*testNode
	seeds  []string
}

func (c *testCluster) start(cfg nodeConfig) *testNode {
	cfg.Join = slices.Clone(c.seeds)
	n := startNode(c.t, cfg)
	c.nodes[cfg.NodeID] = n
	return n
}

func (c *testCluster) alive() []*testNode {
	var out []*testNode
	for _, n := range c.nodes {
		if n.ctx.Err() == nil {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *testNode) int { return cmpString(a.ID(), b.ID()) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// leader waits until every live node agrees on one leader (with its
// metadata) and returns it.
func (c *testCluster) leader() *testNode {
	c.t.Helper()
	var id string
	harness.Eventually(c.t, 15*time.Second, harness.Holds("one leader known to all nodes", func() bool {
		id = ""
		for _, n := range c.alive() {
			li := n.Leader()
			if li.ID == "" || (id != "" && li.ID != id) || li.GRPCAddr == "" {
				return false
			}
			id = li.ID
		}
		l, ok := c.nodes[id]
		return ok && l.ctx.Err() == nil && l.IsLeader()
	}))
	return c.nodes[id]
}

func (c *testCluster) follower() *testNode {
	c.t.Helper()
	l := c.leader()
	for _, n := range c.alive() {
		if n != l {
			return n
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// waitVoters waits until the leader's configuration has exactly want,
// and so does every live node of want (a follower's own checks, Leave's
// floor, read its configuration, which follows the leader's a moment
// later; a live node outside want, one that never joined, has none).
func (c *testCluster) waitVoters(timeout time.Duration, want ...string) {
	c.t.Helper()
	slices.Sort(want)
	harness.Eventually(c.t, timeout, harness.Holds(fmt.Sprintf("voters %v", want), func() bool {
		led := false
		for _, n := range c.alive() {
			if !slices.Contains(want, n.ID()) && !n.IsLeader() {
				continue
			}
			if !slices.Equal(voters(n), want) {
				return false
			}
			led = led || n.IsLeader()
		}
		return led
	}))
}

func (c *testCluster) shutdownAll() {
	for _, n := range c.alive() {
		shutdown(c.t, n)
	}
}

func TestCluster(t *testing.T) {
	base := runtime.NumGoroutine()
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	cfgs := map[string]nodeConfig{}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		cfgs[id] = testConfig(t, id, c.dir, 3)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.seeds = append(c.seeds, cfgs[id].GossipBind)
	}
	defer c.shutdownAll()

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("form three voters", func(t *testing.T) {
		for _, id := range []string{"n1", "n2", "n3"} {
			c.start(cfgs[id])
		}
		c.waitVoters(15*time.Second, "n1", "n2", "n3")
		l := c.leader()
		total := 0
		for _, n := range c.alive() {
			total += int(n.boot.done.Load())
		}
		if total == 0 {
			t.Fatal("nobody bootstrapped")
		}
		harness.Eventually(t, 5*time.Second, harness.Holds("leader service on the leader only", func() bool {
			for _, n := range c.alive() {
				if want := int32(0); n == l {
					if n.svc.running.Load() != 1 {
						return false
					}
				} else if n.svc.running.Load() != want {
					return false
				}
			}
			return true
		}))
	})

	step("apply on leader, raftgroup.ErrNotLeader on follower, leader addresses", func(t *testing.T) {
		l := c.leader()
		if _, err := l.Apply(ctxTimeout(t, 5*time.Second), []byte("x1")); err != nil {
			t.Fatalf("apply on leader: %v", err)
		}
		f := c.follower()
		_, err := f.Apply(ctxTimeout(t, 5*time.Second), []byte("nope"))
		if !errors.Is(err, raftgroup.ErrNotLeader) || !errors.Is(err, raft.ErrNotLeader) {
			t.Fatalf("apply on follower: %v", err)
		}
		for _, n := range c.alive() {
			li := n.Leader()
			if li.ID != l.ID() || li.GRPCAddr != l.cfg.GRPCAdvertise || li.RaftAddr != l.RaftAddr() {
				t.Fatalf("%s sees leader %+v, want %s at %s", n.ID(), li, l.ID(), l.cfg.GRPCAdvertise)
			}
			harness.Eventually(t, 5*time.Second, harness.Holds("replication of x1 to "+n.ID(), func() bool {
				return slices.Contains(n.fsm.Entries(), "x1")
			}))
			if err := n.Barrier(ctxTimeout(t, 5*time.Second)); (n == l) != (err == nil) {
				t.Fatalf("barrier on %s (leader %v): %v", n.ID(), n == l, err)
			}
		}
		st := f.Status()
		if st.LeaderID != l.ID() || st.LeaderAddr != l.cfg.GRPCAdvertise || len(st.Nodes) != 3 {
			t.Fatalf("follower status = %+v", st)
		}
		for _, ns := range st.Nodes {
			if ns.Suffrage != "voter" || !ns.Healthy || (ns.ID == l.ID()) != (ns.State == "leader") || ns.GRPCAddr != cfgs[ns.ID].GRPCAdvertise {
				t.Fatalf("follower status node %+v", ns)
			}
		}
		if ms := f.Members(); len(ms) != 3 || !ms[0].Alive || ms[0].RaftAddr != c.nodes[ms[0].ID].RaftAddr() {
			t.Fatalf("members = %+v", ms)
		}
	})

	step("transfer leadership and snapshot", func(t *testing.T) {
		old := c.leader()
		target := c.follower()
		changed := target.Leadership().Changed
		startsBefore := target.svc.starts.Load()
		got, err := old.TransferLeadership(ctxTimeout(t, 10*time.Second), target.ID())
		if err != nil || got != target.ID() {
			t.Fatalf("transfer to %s: %q, %v", target.ID(), got, err)
		}
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatal("Leadership().Changed not notified")
		}
		if _, err := target.WaitLeadership(ctxTimeout(t, 5*time.Second), func(l raftgroup.Leadership) bool {
			return l.Role == raftgroup.RoleLeader && l.LeaderID == target.ID() && l.Established
		}); err != nil {
			t.Fatalf("target never published itself established leader: %v", err)
		}
		harness.Eventually(t, 5*time.Second, harness.Holds("leader service moved", func() bool {
			return target.svc.starts.Load() == startsBefore+1 && target.svc.running.Load() == 1 && old.svc.running.Load() == 0
		}))
		if _, err := old.TransferLeadership(ctxTimeout(t, time.Second), ""); !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("transfer from follower: %v", err)
		}
		got, err = target.TransferLeadership(ctxTimeout(t, 10*time.Second), "")
		if err != nil || got == target.ID() || got == "" {
			t.Fatalf("transfer to any: %q, %v", got, err)
		}
		l := c.leader()
		if l.ID() != got {
			t.Fatalf("leader %s, transfer said %s", l.ID(), got)
		}
		if _, err := l.Apply(ctxTimeout(t, 5*time.Second), []byte("x2")); err != nil {
			t.Fatalf("apply after transfers: %v", err)
		}
		f := c.follower()
		harness.Eventually(t, 5*time.Second, harness.Holds("x2 on follower", func() bool { return slices.Contains(f.fsm.Entries(), "x2") }))
		idx, err := f.Snapshot(ctxTimeout(t, 10*time.Second))
		if err != nil || idx == 0 || idx > f.AppliedIndex() {
			t.Fatalf("follower snapshot: %d, %v (applied %d)", idx, err, f.AppliedIndex())
		}
		if idx, err := l.Snapshot(ctxTimeout(t, 10*time.Second)); err != nil || idx == 0 {
			t.Fatalf("leader snapshot: %d, %v", idx, err)
		}
	})

	step("fourth node joins as voter", func(t *testing.T) {
		n4 := c.start(cfgs["n4"])
		c.waitVoters(15*time.Second, "n1", "n2", "n3", "n4")
		harness.Eventually(t, 10*time.Second, harness.Holds("n4 catches up", func() bool { return slices.Contains(n4.fsm.Entries(), "x2") }))
		if n4.boot.done.Load() != 0 {
			t.Fatal("late joiner bootstrapped")
		}
		harness.Eventually(t, 5*time.Second, harness.Holds("n4 publishes has-state", func() bool {
			meta, ok := c.leader().ms.MetaOf("n4")
			return ok && meta.State
		}))
	})

	step("failed follower removed after the grace period", func(t *testing.T) {
		victim := c.follower()
		crashed := time.Now()
		crash(t, victim)
		var rest []string
		for _, n := range c.alive() {
			rest = append(rest, n.ID())
		}
		c.waitVoters(testDeadTimeout+15*time.Second, rest...)
		if el := time.Since(crashed); el < testDeadTimeout {
			t.Fatalf("removed after %v, before DeadNodeTimeout %v", el, testDeadTimeout)
		}
	})

	step("fifth node joins", func(t *testing.T) {
		c.start(cfgs["n5"])
		var all []string
		for _, n := range c.alive() {
			all = append(all, n.ID())
		}
		c.waitVoters(15*time.Second, all...)
	})

	step("a follower that leaves is removed at once", func(t *testing.T) {
		f := c.follower()
		if err := f.Leave(ctxTimeout(t, 10*time.Second), false); err != nil {
			t.Fatalf("leave: %v", err)
		}
		// Removed before Leave returned, well before DeadNodeTimeout.
		if got := voters(c.leader()); slices.Contains(got, f.ID()) {
			t.Fatalf("voters after %s left: %v", f.ID(), got)
		}
		shutdown(t, f)
		var rest []string
		for _, n := range c.alive() {
			rest = append(rest, n.ID())
		}
		c.waitVoters(time.Second, rest...)
		if len(rest) != 3 {
			t.Fatalf("%d nodes left, want 3", len(rest))
		}
	})

	step("a stopped follower stays a voter and takes its place again", func(t *testing.T) {
		f := c.follower()
		var all []string
		for _, n := range c.alive() {
			all = append(all, n.ID())
		}
		shutdown(t, f)
		l := c.leader()
		harness.Eventually(t, 10*time.Second, harness.Holds("the leader to see "+f.ID()+" fail in gossip", func() bool {
			for _, m := range l.Members() {
				if m.ID == f.ID() {
					return m.State == "failed"
				}
			}
			return false
		}))
		if l.Leader().ID != l.ID() {
			t.Fatal("leadership moved")
		}
		// A reconcile pass after the failure keeps it: a stop is no leave
		// (a left member goes at once, even at the bootstrap-expect floor
		// this three-voter cluster is at).
		p := l.rec.passes.Load()
		harness.Eventually(t, 10*time.Second, harness.Holds("two reconcile passes", func() bool { return l.rec.passes.Load() >= p+2 }))
		if got := voters(l); !slices.Equal(got, all) {
			t.Fatalf("voters after %s stopped: %v, want %v", f.ID(), got, all)
		}
		c.start(cfgs[f.ID()])
		harness.Eventually(t, 15*time.Second, harness.Holds(f.ID()+" back as a follower", func() bool {
			return c.nodes[f.ID()].Leader().ID == l.ID()
		}))
		c.waitVoters(15*time.Second, all...)
	})

	step("leader crash: new leader, service moves, failed voter kept at the floor", func(t *testing.T) {
		old := c.leader()
		before := slices.Clone(voters(old))
		changedOn := map[string]<-chan struct{}{}
		starts := map[string]int32{}
		for _, n := range c.alive() {
			changedOn[n.ID()] = n.Leadership().Changed
			starts[n.ID()] = n.svc.starts.Load()
		}
		crash(t, old)
		if old.svc.running.Load() != 0 || old.svc.stops.Load() != old.svc.starts.Load() {
			t.Fatal("old leader's service ctx not cancelled")
		}
		l := c.leader()
		if l == old {
			t.Fatal("old leader still leader")
		}
		harness.Eventually(t, 5*time.Second, harness.Holds("leader service on the new leader", func() bool {
			return l.svc.starts.Load() == starts[l.ID()]+1 && l.svc.running.Load() == 1
		}))
		for _, n := range c.alive() {
			select {
			case <-changedOn[n.ID()]:
			default:
				t.Fatalf("%s: Leadership().Changed not notified", n.ID())
			}
			if _, err := n.WaitLeadership(ctxTimeout(t, 5*time.Second), func(v raftgroup.Leadership) bool {
				return v.LeaderKnown() && v.LeaderID == l.ID() && v.Established == (n == l)
			}); err != nil {
				t.Fatalf("%s never published the new leader %s: %v", n.ID(), l.ID(), err)
			}
		}
		if _, err := l.Apply(ctxTimeout(t, 5*time.Second), []byte("x3")); err != nil {
			t.Fatalf("apply on new leader: %v", err)
		}
		// Wait well past the grace period: the failed voter must stay, as
		// removing it would leave 2 < BootstrapExpect voters.
		deadline := time.Now().Add(testDeadTimeout + 3*time.Second)
		harness.Eventually(t, testDeadTimeout+10*time.Second, harness.Holds("failed leader seen failed in gossip", func() bool {
			for _, m := range l.Members() {
				if m.ID == old.ID() {
					return !m.Alive
				}
			}
			return false
		}))
		for time.Now().Before(deadline) {
			if got := voters(l); !slices.Equal(got, before) {
				t.Fatalf("voters changed to %v, want %v kept", got, before)
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-l.ctx.Done():
				t.Fatal("leader stopped")
			}
		}
		st := l.Status()
		for _, ns := range st.Nodes {
			if ns.ID == old.ID() && (ns.State != "unreachable" || ns.Healthy) {
				t.Fatalf("failed node status %+v", ns)
			}
		}
		// An operator can still remove it, by forcing it below the floor.
		if err := l.RemoveNode(ctxTimeout(t, 5*time.Second), old.ID(), false); !errors.Is(err, ErrBelowExpect) {
			t.Fatalf("remove node below BootstrapExpect without force: %v", err)
		}
		if got := voters(l); !slices.Equal(got, before) {
			t.Fatalf("voters changed to %v by a refused removal", got)
		}
		if err := l.RemoveNode(ctxTimeout(t, 5*time.Second), old.ID(), true); err != nil {
			t.Fatalf("remove node: %v", err)
		}
		if err := l.RemoveNode(ctxTimeout(t, 5*time.Second), old.ID(), true); !errors.Is(err, raftgroup.ErrUnknownNode) {
			t.Fatalf("remove again: %v", err)
		}
		if err := l.RemoveNode(ctxTimeout(t, 5*time.Second), l.ID(), true); !errors.Is(err, ErrRemoveLeader) {
			t.Fatalf("remove leader: %v", err)
		}
		if err := c.follower().RemoveNode(ctxTimeout(t, 5*time.Second), l.ID(), true); !errors.Is(err, raftgroup.ErrNotLeader) {
			t.Fatalf("remove on follower: %v", err)
		}
		if got := voters(l); len(got) != 2 {
			t.Fatalf("voters after remove: %v", got)
		}
	})

	c.shutdownAll()
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

func TestBootstrapWaitsForExpect(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	a := startNode(t, testConfig(t, "a", dir, 2))
	defer shutdown(t, a)

	if _, err := a.WaitLeader(ctxTimeout(t, 1500*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lone node with BootstrapExpect 2: WaitLeader = %v, want deadline exceeded", err)
	}
	if a.boot.done.Load() != 0 || a.AppliedIndex() != 0 {
		t.Fatal("bootstrapped alone")
	}
	if _, err := a.Apply(ctxTimeout(t, time.Second), []byte("x")); !errors.Is(err, raftgroup.ErrNotLeader) {
		t.Fatalf("apply without a cluster: %v", err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Apply(cctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("apply with cancelled ctx: %v", err)
	}

	cfg := testConfig(t, "b", dir, 2)
	cfg.Join = []string{a.GossipAddr()}
	b := startNode(t, cfg)
	defer shutdown(t, b)
	for _, n := range []*testNode{a, b} {
		li, err := n.WaitLeader(ctxTimeout(t, 10*time.Second))
		if err != nil {
			t.Fatalf("%s: no leader: %v", n.ID(), err)
		}
		harness.Eventually(t, 5*time.Second, harness.Holds("two voters on "+n.ID(), func() bool { return slices.Equal(voters(n), []string{"a", "b"}) }))
		t.Logf("%s sees leader %+v", n.ID(), li)
	}
	if a.boot.done.Load()+b.boot.done.Load() == 0 {
		t.Fatal("nobody bootstrapped")
	}
	// The leader leaves: it hands over and is removed, and the other node
	// carries on alone. Below bootstrap-expect that needs force.
	l, other := a, b
	if b.IsLeader() {
		l, other = b, a
	}
	starts := other.svc.starts.Load()
	if err := l.Leave(ctxTimeout(t, 10*time.Second), false); !errors.Is(err, ErrBelowExpect) {
		t.Fatalf("leave below bootstrap-expect without force: %v", err)
	}
	if !l.IsLeader() || !slices.Equal(voters(l), []string{"a", "b"}) {
		t.Fatal("a refused leave changed leadership or the voters")
	}
	if err := l.Leave(ctxTimeout(t, 10*time.Second), true); err != nil {
		t.Fatalf("forced leave: %v", err)
	}
	shutdown(t, l)
	if !other.IsLeader() {
		t.Fatalf("%s not leader after %s left gracefully", other.ID(), l.ID())
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("sole voter "+other.ID(), func() bool { return slices.Equal(voters(other), []string{other.ID()}) }))
	if other.svc.starts.Load() != starts+1 || other.svc.running.Load() != 1 {
		t.Fatalf("leader service on %s: starts %d running %d", other.ID(), other.svc.starts.Load(), other.svc.running.Load())
	}
	if _, err := other.Apply(ctxTimeout(t, 5*time.Second), []byte("after")); err != nil {
		t.Fatalf("apply on the remaining node: %v", err)
	}
	shutdown(t, other)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}
