package broker

import (
	"context"
	"sync"

	"github.com/raftq/raftq/cluster"
)

// The leadership lifecycle: the cluster node publishes leadership as
// values (leader known, established after its Barrier, lost); one
// goroutine follows them and runs the leader-only work for exactly the
// stretch of an established term: the scheduler (which owns its sweeper)
// and the cluster-version raiser (version.go).

// startLeadership starts following the node's leadership.
func (b *Broker) startLeadership() {
	ctx, cancel := context.WithCancel(context.Background())
	b.stopLeading = cancel
	b.leadingDone = make(chan struct{})
	go func() {
		defer close(b.leadingDone)
		b.followLeadership(ctx)
	}()
}

// stopLeadership ends the current term's work (if any) and stops following.
func (b *Broker) stopLeadership() {
	b.stopLeading()
	<-b.leadingDone
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

func (b *Broker) followLeadership(ctx context.Context) {
	var running *leaderTerm
	defer func() {
		if running != nil {
			running.stop()
		}
	}()
	for {
		l := b.node.Leadership()
		lead := l.Role == cluster.RoleLeader && l.Established
		if running != nil && (!lead || running.term != l.Term) {
			running.stop()
			running = nil
		}
		if lead && running == nil {
			running = b.runTerm(l.Term)
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
func (b *Broker) runTerm(term uint64) *leaderTerm {
	ctx, cancel := context.WithCancel(context.Background())
	t := &leaderTerm{term: term, cancel: cancel, done: make(chan struct{})}
	b.feed.listen(b.sched)
	go func() {
		defer close(t.done)
		defer b.feed.stop()
		var wg sync.WaitGroup
		wg.Go(func() { b.raiseClusterVersion(ctx) })
		b.log.Info("leader term established: starting the scheduler", "term", term)
		b.sched.RunLeader(ctx)
		b.log.Info("leader term over: scheduler stopped", "term", term)
		wg.Wait()
	}()
	return t
}
