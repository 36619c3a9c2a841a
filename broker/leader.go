package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/raftgroup"
)

// leaderNode is what the leadership owner reads of the group's Raft node:
// its published leadership, and the hand-over a term asks for when its
// duties cannot all start.
type leaderNode interface {
	Leadership() raftgroup.Leadership
	TransferLeadership(ctx context.Context, id string) (string, error)
}

// A duty is one job of the group's leader, run for exactly the stretch of
// an established term. start begins it and returns once it runs; it runs
// until ctx ends, and wait returns once it has stopped. An error means it
// did not start: nothing of it runs, and wait is nil.
type duty struct {
	name  string
	start func(ctx context.Context, term uint64) (wait func(), err error)
}

// goDuty is a duty that is one goroutine, run until ctx ends.
func goDuty(name string, run func(ctx context.Context, term uint64)) duty {
	return duty{name: name, start: func(ctx context.Context, term uint64) (func(), error) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(ctx, term)
		}()
		return func() { <-done }, nil
	}}
}

// leaderWork is the group's one owner of leadership events (as Nomad's
// leaderLoop with establishLeadership and revokeLeadership). The cluster
// node publishes leadership as values (leader known, established after
// its Barrier, lost); one goroutine follows them and, for each
// established term, starts every duty of one list in order and stops
// them all when the term ends. If a duty fails to start, those started
// are stopped again (none is left running without the others), and the
// node hands leadership over: a leader that cannot do its duties should
// not lead; while it still leads the same term it tries again after a
// back-off. Node duties (the counter audit, the hand-back sender) are not
// leader-only: they run on every node from start to stop, listed here so
// that this is the one place that starts and stops the group's background
// work. Nothing else in the group watches leadership; routing (route.go)
// reads it per call.
type leaderWork struct {
	log  *slog.Logger
	node leaderNode
	// duties run for each established term: started in this order,
	// stopped all at once and waited for in the reverse order.
	duties []duty
	// nodeDuties run on every node from start to stop (term 0).
	nodeDuties []duty
	// retry is the first back-off before a term whose duties failed to
	// start tries again (0 = 1s); it doubles up to a minute.
	retry time.Duration

	// changes counts the leaders seen take office (for metrics).
	changes atomic.Uint64

	cancel context.CancelFunc
	done   chan struct{}
}

// transferTimeout bounds the hand-over a term asks for when its duties
// fail to start.
const transferTimeout = 10 * time.Second

// start starts the node duties and follows the node's leadership until
// stop. A node duty that fails to start is logged and left out: the
// others are independent of it (the audit needs nothing of the hand-back
// sender), and there is no leadership to hand over.
func (w *leaderWork) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done = make(chan struct{})
	// The node duties stop only after the last term's duties have: the
	// scheduler hands back what it never sent as it stops, and the
	// hand-back sender must still be there to take it.
	nctx, ncancel := context.WithCancel(context.Background())
	var waits []func()
	for _, d := range w.nodeDuties {
		wait, err := d.start(nctx, 0)
		if err != nil {
			w.log.Error("a node duty did not start", "duty", d.name, "err", err)
			continue
		}
		waits = append(waits, wait)
	}
	go func() {
		defer close(w.done)
		w.follow(ctx)
		ncancel()
		for i := len(waits) - 1; i >= 0; i-- {
			waits[i]()
		}
	}()
}

// stop ends the current term's duties (if any) and the node duties, and
// stops following.
func (w *leaderWork) stop() {
	w.cancel()
	<-w.done
}

// leaderTerm is the duties of one established term that started.
type leaderTerm struct {
	term    uint64
	cancel  context.CancelFunc
	names   []string
	waits   []func()
	started time.Time
}

// revoke stops every duty of the term: all are cancelled at once, then
// waited for in the reverse of their start order.
func (t *leaderTerm) revoke() {
	t.cancel()
	for i := len(t.waits) - 1; i >= 0; i-- {
		t.waits[i]()
	}
}

// establish starts every duty of the list for term, in order. If one
// fails, the duties started before it are revoked and the error names
// the one that failed.
func (w *leaderWork) establish(term uint64) (*leaderTerm, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &leaderTerm{term: term, cancel: cancel, started: time.Now()}
	for _, d := range w.duties {
		wait, err := d.start(ctx, term)
		if err != nil {
			t.revoke()
			return nil, fmt.Errorf("leader duty %s did not start: %w", d.name, err)
		}
		t.names = append(t.names, d.name)
		t.waits = append(t.waits, wait)
	}
	return t, nil
}

func (w *leaderWork) follow(ctx context.Context) {
	var running *leaderTerm
	defer func() {
		if running != nil {
			w.revoke(running)
		}
	}()
	var seenID string
	var seenTerm uint64
	// failed: the term whose duties failed to start; retryAt: when it
	// may try again.
	var failed uint64
	var retryAt <-chan time.Time
	backoff := w.retry
	if backoff <= 0 {
		backoff = time.Second
	}
	wait := backoff
	for {
		l := w.node.Leadership()
		if l.LeaderID != "" && (l.LeaderID != seenID || l.Term != seenTerm) {
			seenID, seenTerm = l.LeaderID, l.Term
			w.changes.Add(1)
		}
		lead := l.Role == raftgroup.RoleLeader && l.Established
		if running != nil && (!lead || running.term != l.Term) {
			w.revoke(running)
			running = nil
		}
		if failed != 0 && (!lead || failed != l.Term) {
			failed, retryAt, wait = 0, nil, backoff // a new term starts afresh
		}
		if lead && running == nil && failed == 0 {
			t, err := w.establish(l.Term)
			if err == nil {
				w.log.Info("leader term established: leader duties started", "term", l.Term, "duties", t.names)
				running = t
			} else {
				w.log.Error("leader term not established: handing leadership over", "term", l.Term, "err", err, "retry_in", wait)
				tctx, cancel := context.WithTimeout(ctx, transferTimeout)
				if _, terr := w.node.TransferLeadership(tctx, ""); terr != nil && ctx.Err() == nil {
					w.log.Error("could not hand leadership over", "err", terr)
				}
				cancel()
				failed, retryAt = l.Term, time.After(wait)
				wait = min(2*wait, time.Minute)
				continue // the hand-over may have changed leadership
			}
		}
		if l.Role == raftgroup.RoleShutdown {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Changed:
		case <-retryAt:
			failed, retryAt = 0, nil
		}
	}
}

func (w *leaderWork) revoke(t *leaderTerm) {
	t.revoke()
	w.log.Info("leader term over: leader duties stopped", "term", t.term, "duties", t.names, "led_for", time.Since(t.started).Round(time.Millisecond))
}

// leaderDuties is the one list of the group's leader-only work, in start
// order. The replica check comes first: a node whose state diverged
// fails to start it, so nothing else starts from a bad state.
func (b *Broker) leaderDuties() []duty {
	return []duty{
		b.replicas.duty(),
		b.schedulerDuty(),
		goDuty("cluster version raiser", b.raiser.run),
		goDuty("meta settings follower", b.metaFollow.run),
	}
}

// nodeDuties is the group's work on every node, leader or not, from New
// to Close: the counter audit, and the sender of what a lost term granted
// and never sent (handback.go), which goes on after the term that
// produced it.
func (b *Broker) nodeDuties() []duty {
	return []duty{
		goDuty("counter audit", b.audit.run),
		goDuty("hand-back sender", b.handBacks.run),
	}
}

// schedulerDuty runs the scheduler (which owns its sweeper) for the term;
// the change feed points at it for exactly that stretch.
func (b *Broker) schedulerDuty() duty {
	return duty{name: "scheduler", start: func(ctx context.Context, term uint64) (func(), error) {
		b.feed.listen(b.sched)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer b.feed.stop()
			b.sched.RunLeader(ctx)
		}()
		return func() { <-done }, nil
	}}
}
