package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/raftq/raftq/raftgroup"
)

// fakeLeaderNode publishes the leadership values a test sets, as
// cluster.Node does (each new value closes the previous one's Changed),
// and records the hand-overs asked of it.
type fakeLeaderNode struct {
	mu        sync.Mutex
	cur       raftgroup.Leadership
	changed   chan struct{}
	transfers int
}

func newFakeLeaderNode() *fakeLeaderNode {
	f := &fakeLeaderNode{changed: make(chan struct{})}
	f.cur.Changed = f.changed
	return f
}

func (f *fakeLeaderNode) Leadership() raftgroup.Leadership {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *fakeLeaderNode) publish(l raftgroup.Leadership) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.changed
	f.changed = make(chan struct{})
	l.Changed = f.changed
	f.cur = l
	close(old)
}

func (f *fakeLeaderNode) TransferLeadership(context.Context, string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.transfers++
	return "", errors.New("no other voter to hand over to")
}

func (f *fakeLeaderNode) transferCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.transfers
}

func leading(term uint64) raftgroup.Leadership {
	return raftgroup.Leadership{Role: raftgroup.RoleLeader, Term: term, LeaderID: "self", Established: true}
}

// dutyLog records which duties run, for which term, and how often each
// started and stopped.
type dutyLog struct {
	mu      sync.Mutex
	running map[string]uint64 // duty -> term
	starts  map[string]int
	stops   map[string]int
	// fail makes a duty's start fail while it returns an error.
	fail map[string]func() error
}

func newDutyLog() *dutyLog {
	return &dutyLog{running: map[string]uint64{}, starts: map[string]int{}, stops: map[string]int{}, fail: map[string]func() error{}}
}

// duty is a duty named name that records itself in the log.
func (d *dutyLog) duty(name string) duty {
	return duty{name: name, start: func(ctx context.Context, term uint64) (func(), error) {
		d.mu.Lock()
		fail := d.fail[name]
		d.mu.Unlock()
		if fail != nil {
			if err := fail(); err != nil {
				return nil, err
			}
		}
		d.mu.Lock()
		if t, ok := d.running[name]; ok {
			d.mu.Unlock()
			return nil, fmt.Errorf("%s started for term %d while running for term %d", name, term, t)
		}
		d.running[name] = term
		d.starts[name]++
		d.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			<-ctx.Done()
			d.mu.Lock()
			delete(d.running, name)
			d.stops[name]++
			d.mu.Unlock()
		}()
		return func() { <-done }, nil
	}}
}

func (d *dutyLog) snapshot() (running map[string]uint64, starts, stops map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.running), maps.Clone(d.starts), maps.Clone(d.stops)
}

// expectRunning checks that exactly the named duties run, all for term.
func (d *dutyLog) expectRunning(t *testing.T, when string, term uint64, names ...string) {
	t.Helper()
	synctest.Wait()
	running, _, _ := d.snapshot()
	want := map[string]uint64{}
	for _, n := range names {
		want[n] = term
	}
	if !maps.Equal(running, want) {
		t.Fatalf("%s: running %v, want %v", when, running, want)
	}
}

// TestLeaderDutiesFollowEstablishedTerms: every duty of the list starts
// once a term is established (not before its Barrier, not as a follower
// or candidate), all stop when leadership is lost, a new term restarts
// them all, and the node duties run from start to stop whatever the
// role.
func TestLeaderDutiesFollowEstablishedTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := newFakeLeaderNode()
		log := newDutyLog()
		all := []string{"replica check", "scheduler", "cluster version raiser"}
		w := &leaderWork{log: quietLogger(), node: node, nodeDuties: []duty{log.duty("counter audit")}}
		for _, n := range all {
			w.duties = append(w.duties, log.duty(n))
		}
		w.start()
		log.expectRunning(t, "a follower", 0, "counter audit")

		node.publish(raftgroup.Leadership{Role: raftgroup.RoleCandidate, Term: 2})
		log.expectRunning(t, "a candidate", 0, "counter audit")
		node.publish(raftgroup.Leadership{Role: raftgroup.RoleLeader, Term: 2, LeaderID: "self"})
		log.expectRunning(t, "a leader before its Barrier", 0, "counter audit")

		node.publish(leading(2))
		synctest.Wait()
		running, _, _ := log.snapshot()
		for _, n := range all {
			if running[n] != 2 {
				t.Fatalf("term 2 established: %s not running for it (%v)", n, running)
			}
		}
		// A republished value of the same term (say, the leader's gossip
		// metadata arriving) changes nothing.
		node.publish(leading(2))
		synctest.Wait()
		if _, starts, _ := log.snapshot(); starts["scheduler"] != 1 {
			t.Fatalf("the same term republished restarted its duties: %v", starts)
		}

		node.publish(raftgroup.Leadership{Role: raftgroup.RoleFollower, Term: 3, LeaderID: "other"})
		log.expectRunning(t, "leadership lost", 0, "counter audit")

		node.publish(leading(4))
		synctest.Wait()
		// A newer term without a loss in between (an election this node
		// won again) stops the old term's duties and starts the new's.
		node.publish(leading(5))
		synctest.Wait()
		running, starts, stops := log.snapshot()
		for _, n := range all {
			if running[n] != 5 || starts[n] != 3 || stops[n] != 2 {
				t.Fatalf("term 5: %s running for %d, started %d and stopped %d times; want 5, 3, 2", n, running[n], starts[n], stops[n])
			}
		}
		if running["counter audit"] != 0 || starts["counter audit"] != 1 {
			t.Fatalf("the node duty restarted with the terms: %v, %v", running, starts)
		}

		w.stop()
		running, starts, stops = log.snapshot()
		if len(running) != 0 {
			t.Fatalf("after stop, still running: %v", running)
		}
		for n, c := range starts {
			if stops[n] != c {
				t.Fatalf("%s started %d times and stopped %d", n, c, stops[n])
			}
		}
		if node.transferCount() != 0 {
			t.Fatal("leadership handed over though every duty started")
		}
	})
}

// TestLeaderDutyFailingToStart: a duty that fails to start leaves none of
// the others running (those started before it are stopped, those after
// it never start), the node hands leadership over, and while it still
// leads that term it tries again after a back-off; once every duty
// starts, all run.
func TestLeaderDutyFailingToStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := newFakeLeaderNode()
		log := newDutyLog()
		failures := 2
		log.fail["scheduler"] = func() error {
			if failures > 0 {
				failures--
				return errors.New("injected")
			}
			return nil
		}
		w := &leaderWork{log: quietLogger(), node: node, retry: time.Second}
		for _, n := range []string{"replica check", "scheduler", "cluster version raiser"} {
			w.duties = append(w.duties, log.duty(n))
		}
		w.start()
		defer w.stop()

		node.publish(leading(7))
		log.expectRunning(t, "the first attempt failed", 0)
		_, starts, stops := log.snapshot()
		if starts["replica check"] != 1 || stops["replica check"] != 1 || starts["cluster version raiser"] != 0 {
			t.Fatalf("first attempt: starts %v, stops %v; want the replica check started and stopped, the raiser never started", starts, stops)
		}
		if node.transferCount() != 1 {
			t.Fatalf("%d hand-overs asked, want 1", node.transferCount())
		}

		// Still the leader of term 7 (the hand-over failed): after the
		// back-off it tries again, fails again, and backs off longer.
		time.Sleep(time.Second)
		log.expectRunning(t, "the second attempt failed", 0)
		if node.transferCount() != 2 {
			t.Fatalf("%d hand-overs asked, want 2", node.transferCount())
		}
		time.Sleep(time.Second)
		log.expectRunning(t, "within the doubled back-off", 0)
		time.Sleep(time.Second)
		log.expectRunning(t, "the third attempt", 7, "replica check", "scheduler", "cluster version raiser")
		if node.transferCount() != 2 {
			t.Fatalf("%d hand-overs asked, want 2", node.transferCount())
		}
	})
}

// TestLeaderDutiesFailedTermEndsWithIt: a term whose duties failed does
// not retry once it is over, and the next term starts afresh.
func TestLeaderDutiesFailedTermEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := newFakeLeaderNode()
		log := newDutyLog()
		failing := true
		log.fail["scheduler"] = func() error {
			if failing {
				return errors.New("injected")
			}
			return nil
		}
		w := &leaderWork{log: quietLogger(), node: node, retry: time.Second}
		for _, n := range []string{"replica check", "scheduler"} {
			w.duties = append(w.duties, log.duty(n))
		}
		w.start()
		defer w.stop()
		node.publish(leading(3))
		log.expectRunning(t, "failed", 0)
		node.publish(raftgroup.Leadership{Role: raftgroup.RoleFollower, Term: 4, LeaderID: "other"})
		time.Sleep(time.Minute)
		synctest.Wait()
		_, starts, _ := log.snapshot()
		if starts["replica check"] != 1 {
			t.Fatalf("a follower retried a lost term's duties: %v", starts)
		}
		failing = false
		node.publish(leading(5))
		log.expectRunning(t, "term 5", 5, "replica check", "scheduler")
	})
}
