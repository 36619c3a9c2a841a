package broker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"github.com/raftq/raftq/scheduler"
)

// leaderWork is the leadership lifecycle. The cluster node publishes
// leadership as values (leader known, established after its Barrier,
// lost); one goroutine follows them and runs the leader-only work for
// exactly the stretch of an established term: the scheduler (which owns
// its sweeper) and the cluster-version raiser (version.go). The counter
// audit (audit.go) runs on every node for as long as it follows.
type leaderWork struct {
	log   *slog.Logger
	node  *cluster.Node
	state *fsm.FSM
	sched *scheduler.Scheduler
	feed  *changeFeed
	// propose is Broker.Propose.
	propose func(context.Context, *fsmv1.Command) (fsm.Result, error)
	audit   AuditConfig

	// changes counts the leaders seen take office (for metrics).
	changes atomic.Uint64
	// audited counts the queues the counter audit recounted (for metrics).
	audited atomic.Uint64
	// report asks the leader for a recount (Broker.reportDrift); nil: a
	// follower cannot (Config.Peers is nil).
	report DriftReporter

	cancel context.CancelFunc
	done   chan struct{}
}

// start follows the node's leadership until stop.
func (w *leaderWork) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		var wg sync.WaitGroup
		wg.Go(func() { w.auditCounters(ctx) })
		w.follow(ctx)
		wg.Wait()
	}()
}

// stop ends the current term's work (if any) and stops following.
func (w *leaderWork) stop() {
	w.cancel()
	<-w.done
}

// leaderTerm is the work of one established term.
type leaderTerm struct {
	term   uint64
	cancel context.CancelFunc
	done   chan struct{}
}

func (t *leaderTerm) stop() {
	t.cancel()
	<-t.done
}

func (w *leaderWork) follow(ctx context.Context) {
	var running *leaderTerm
	defer func() {
		if running != nil {
			running.stop()
		}
	}()
	var seenID string
	var seenTerm uint64
	for {
		l := w.node.Leadership()
		if l.LeaderID != "" && (l.LeaderID != seenID || l.Term != seenTerm) {
			seenID, seenTerm = l.LeaderID, l.Term
			w.changes.Add(1)
		}
		lead := l.Role == cluster.RoleLeader && l.Established
		if running != nil && (!lead || running.term != l.Term) {
			running.stop()
			running = nil
		}
		if lead && running == nil {
			running = w.runTerm(l.Term)
		}
		if l.Role == cluster.RoleShutdown {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Changed:
		}
	}
}

// runTerm starts the leader-only work of one established term.
func (w *leaderWork) runTerm(term uint64) *leaderTerm {
	ctx, cancel := context.WithCancel(context.Background())
	t := &leaderTerm{term: term, cancel: cancel, done: make(chan struct{})}
	w.feed.listen(w.sched)
	go func() {
		defer close(t.done)
		defer w.feed.stop()
		var wg sync.WaitGroup
		wg.Go(func() { w.raiseClusterVersion(ctx) })
		w.log.Info("leader term established: starting the scheduler", "term", term)
		w.sched.RunLeader(ctx)
		w.log.Info("leader term over: scheduler stopped", "term", term)
		wg.Wait()
	}()
	return t
}
