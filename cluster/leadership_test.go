package cluster

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/test/harness"
)

// leadershipLog records every value a node publishes, in order (through
// the Config.onLeadership hook, so nothing is coalesced).
type leadershipLog struct {
	mu     sync.Mutex
	values []raftgroup.Leadership
}

func (r *leadershipLog) add(l raftgroup.Leadership) {
	r.mu.Lock()
	r.values = append(r.values, l)
	r.mu.Unlock()
}

func (r *leadershipLog) all() []raftgroup.Leadership {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.values)
}

// checkLeadershipLog checks what must hold of any node's sequence: terms
// never go back; only a leader naming itself is established; every
// established value follows a non-established leader value of the same
// term (the Barrier comes between); nothing follows the final value.
func checkLeadershipLog(t *testing.T, self string, vs []raftgroup.Leadership) {
	t.Helper()
	for i, v := range vs {
		if i > 0 && v.Term < vs[i-1].Term {
			t.Errorf("%s: value %d: term went back from %d to %d", self, i, vs[i-1].Term, v.Term)
		}
		if v.LeaderID == self && v.Role != raftgroup.RoleLeader {
			t.Errorf("%s: value %d names itself leader with role %v", self, i, v.Role)
		}
		if v.Role == raftgroup.RoleShutdown && i != len(vs)-1 {
			t.Errorf("%s: value %d after the final one", self, i)
		}
		if !v.Established {
			continue
		}
		if v.Role != raftgroup.RoleLeader || v.LeaderID != self {
			t.Errorf("%s: value %d established but %v led by %q", self, i, v.Role, v.LeaderID)
		}
		if i == 0 || vs[i-1].Established {
			continue // a repeat of an established state (e.g. new leader metadata) is fine
		}
		if p := vs[i-1]; p.Role != raftgroup.RoleLeader || p.LeaderID != self || p.Term != v.Term {
			t.Errorf("%s: value %d established in term %d right after %+v, not after a non-established leader value of that term", self, i, v.Term, p)
		}
	}
}

// watch follows n's published values through the public API until ctx
// ends, and returns what it saw.
func watch(ctx context.Context, n *raftgroup.Group) <-chan []raftgroup.Leadership {
	out := make(chan []raftgroup.Leadership, 1)
	go func() {
		var seen []raftgroup.Leadership
		defer func() { out <- seen }()
		for {
			l := n.Leadership()
			seen = append(seen, l)
			select {
			case <-ctx.Done():
				return
			case <-l.Changed:
			}
		}
	}()
	return out
}

func TestLeadershipEventsAcrossElectionAndTransfer(t *testing.T) {
	base := runtime.NumGoroutine()
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	logs := map[string]*leadershipLog{}
	var cfgs []nodeConfig
	for _, id := range []string{"e1", "e2", "e3"} {
		cfg := testConfig(t, id, c.dir, 3)
		logs[id] = &leadershipLog{}
		cfg.onLeadership = logs[id].add
		cfgs = append(cfgs, cfg)
		c.seeds = append(c.seeds, cfg.GossipBind)
	}
	defer c.shutdownAll()
	for _, cfg := range cfgs {
		c.start(cfg)
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	watched := map[string]<-chan []raftgroup.Leadership{}
	for id, n := range c.nodes {
		watched[id] = watch(wctx, n.Group)
	}

	// Election: everyone publishes the same leader with its gRPC address;
	// the leader publishes itself established.
	old := c.leader()
	first, err := old.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool { return l.Established })
	if err != nil {
		t.Fatalf("leader %s never established: %v", old.ID(), err)
	}
	for _, n := range c.alive() {
		l, err := n.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool {
			return l.LeaderKnown() && l.LeaderID == old.ID()
		})
		if err != nil {
			t.Fatalf("%s never published leader %s: %v", n.ID(), old.ID(), err)
		}
		if l.LeaderGRPCAddr != old.cfg.GRPCAdvertise || l.LeaderRaftAddr != old.RaftAddr() || l.Term != first.Term {
			t.Fatalf("%s publishes %+v; want leader %s at %s in term %d", n.ID(), l, old.ID(), old.cfg.GRPCAdvertise, first.Term)
		}
		if (n == old) != (l.Role == raftgroup.RoleLeader) || (n != old && l.Established) {
			t.Fatalf("%s publishes role %v established %v", n.ID(), l.Role, l.Established)
		}
	}

	// Transfer: the old leader publishes the loss, the target its own
	// established term, the third node the new leader.
	var target *testNode
	for _, n := range c.alive() {
		if n != old {
			target = n
			break
		}
	}
	if _, err := old.TransferLeadership(ctxTimeout(t, 10*time.Second), target.ID()); err != nil {
		t.Fatalf("transfer to %s: %v", target.ID(), err)
	}
	second, err := target.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool { return l.Established })
	if err != nil {
		t.Fatalf("target %s never established: %v", target.ID(), err)
	}
	if second.Term <= first.Term {
		t.Fatalf("new term %d not after %d", second.Term, first.Term)
	}
	for _, n := range c.alive() {
		if _, err := n.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool {
			return l.LeaderKnown() && l.LeaderID == target.ID() && l.LeaderGRPCAddr == target.cfg.GRPCAdvertise
		}); err != nil {
			t.Fatalf("%s never published leader %s: %v", n.ID(), target.ID(), err)
		}
	}
	if l := old.Leadership(); l.Role == raftgroup.RoleLeader || l.Established {
		t.Fatalf("old leader still publishes %+v", l)
	}

	// The old leader's full sequence: established in the first term, then
	// lost (no longer established) before it names the target.
	ov := logs[old.ID()].all()
	iEst := slices.IndexFunc(ov, func(l raftgroup.Leadership) bool { return l.Established && l.Term == first.Term })
	// Lost is looked for after established: a candidate may publish the
	// first term before it wins it.
	iLost := -1
	if iEst >= 0 {
		if i := slices.IndexFunc(ov[iEst:], func(l raftgroup.Leadership) bool { return l.Term >= first.Term && l.Role != raftgroup.RoleLeader }); i >= 0 {
			iLost = iEst + i
		}
	}
	iNew := slices.IndexFunc(ov, func(l raftgroup.Leadership) bool { return l.LeaderID == target.ID() })
	if iEst < 0 || iLost < iEst || iNew < iLost {
		t.Fatalf("old leader's sequence out of order (established %d, lost %d, new leader %d): %+v", iEst, iLost, iNew, ov)
	}
	// The target's: a follower of the old leader, then leader not yet
	// established, then established, all in order.
	tv := logs[target.ID()].all()
	iFollow := slices.IndexFunc(tv, func(l raftgroup.Leadership) bool { return l.LeaderID == old.ID() })
	iLead := slices.IndexFunc(tv, func(l raftgroup.Leadership) bool { return l.Role == raftgroup.RoleLeader && l.Term == second.Term })
	iEst = slices.IndexFunc(tv, func(l raftgroup.Leadership) bool { return l.Established && l.Term == second.Term })
	if iFollow < 0 || iLead < iFollow || iEst <= iLead || tv[iLead].Established {
		t.Fatalf("target's sequence out of order (follower %d, leader %d, established %d): %+v", iFollow, iLead, iEst, tv)
	}

	stopWatch()
	for id, ch := range watched {
		seen := <-ch
		checkLeadershipLog(t, id, seen)
		if !slices.ContainsFunc(seen, func(l raftgroup.Leadership) bool { return l.LeaderID == target.ID() && l.LeaderKnown() }) {
			t.Errorf("%s: watcher never saw leader %s: %+v", id, target.ID(), seen)
		}
	}
	c.shutdownAll()
	for id, rec := range logs {
		vs := rec.all()
		checkLeadershipLog(t, id, vs)
		if last := vs[len(vs)-1]; last.Role != raftgroup.RoleShutdown {
			t.Errorf("%s: last value %+v, want the shutdown value", id, last)
		}
	}
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// gatedFSM blocks every Apply until open is closed, and says when the
// first Apply is waiting.
type gatedFSM struct {
	*testFSM
	entered chan struct{}
	once    sync.Once
	open    chan struct{}
}

func (f *gatedFSM) Apply(l *raft.Log) any {
	f.once.Do(func() { close(f.entered) })
	<-f.open
	return f.testFSM.Apply(l)
}

func TestLeadershipEstablishedOnlyAfterBarrier(t *testing.T) {
	base := runtime.NumGoroutine()
	cfg := testConfig(t, "solo", t.TempDir(), 1)
	n := startNode(t, cfg)
	if _, err := n.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool { return l.Established }); err != nil {
		t.Fatalf("never established: %v", err)
	}
	for _, cmd := range []string{"a", "b"} {
		if _, err := n.Apply(ctxTimeout(t, 5*time.Second), []byte(cmd)); err != nil {
			t.Fatalf("apply %s: %v", cmd, err)
		}
	}
	rec := &leadershipLog{}
	shutdown(t, n)

	// Restart with an FSM that cannot apply: the node wins its election,
	// but its Barrier cannot complete before the old entries are applied.
	cfg.onLeadership = rec.add
	fsm := &gatedFSM{testFSM: &testFSM{}, entered: make(chan struct{}), open: make(chan struct{})}
	svc := &testLeader{}
	r, err := openNode(ctxTimeout(t, 10*time.Second), cfg, fsm, svc)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	opened := false
	defer func() {
		if !opened {
			close(fsm.open)
		}
		if err := r.Shutdown(ctxTimeout(t, 20*time.Second)); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	select {
	case <-fsm.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted node never applied its log")
	}
	l, err := r.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool { return l.Role == raftgroup.RoleLeader })
	if err != nil {
		t.Fatalf("restarted node never published itself leader: %v", err)
	}
	if l.Established || r.LeaderReady() || svc.starts.Load() != 0 {
		t.Fatalf("established before its Barrier: %+v, ready %v, service starts %d", l, r.LeaderReady(), svc.starts.Load())
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.WaitLeadership(cctx, func(l raftgroup.Leadership) bool { return l.Established }); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitLeadership with a cancelled ctx while not established: %v", err)
	}
	close(fsm.open)
	opened = true
	l, err = r.WaitLeadership(ctxTimeout(t, 10*time.Second), func(l raftgroup.Leadership) bool { return l.Established })
	if err != nil {
		t.Fatalf("never established after the gate opened: %v", err)
	}
	if got := fsm.Entries(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("established with entries %v applied, want a and b", got)
	}
	if !r.LeaderReady() {
		t.Fatal("LeaderReady false while established")
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("leader service start", func() bool { return svc.running.Load() == 1 }))

	// On shutdown the leader publishes "not established" (the service has
	// stopped while Raft still runs) before the final value.
	if err := r.Shutdown(ctxTimeout(t, 20*time.Second)); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := r.WaitLeadership(ctxTimeout(t, time.Second), func(l raftgroup.Leadership) bool { return l.Established }); !errors.Is(err, raftgroup.ErrShutdown) {
		t.Fatalf("WaitLeadership after shutdown: %v", err)
	}
	vs := rec.all()
	checkLeadershipLog(t, "solo", vs)
	if len(vs) < 3 {
		t.Fatalf("values %+v", vs)
	}
	tail := vs[len(vs)-3:]
	if !tail[0].Established || tail[1].Established || tail[1].Role != raftgroup.RoleLeader || tail[2].Role != raftgroup.RoleShutdown {
		t.Fatalf("shutdown sequence %+v, want established, leader not established, shutdown", tail)
	}
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}
