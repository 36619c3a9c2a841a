package scheduler

import (
	"fmt"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// policy is the picking state of one term: each queue's cursors and token
// buckets, and the pass's scratch. The loop owns it during a pass;
// KeyStats reads it; mu orders the two.
type policy struct {
	mu     sync.Mutex
	queues map[string]*queuePolicy
	qrot   int // rotating start of the pass over queues
	names  []string
	drop   []string
	sc     pickScratch
	cs     creditScratch
}

type queuePolicy struct {
	cur cursors
	bk  buckets
	// stalled: the last pick over the queue, with credit to fill, found
	// nothing deliverable. Until the queue changes (an applied entry
	// touches it, or a failed grant frees its pending marks) or wake (a
	// throttle's next token; zero: none) passes, nothing can be, and
	// passes skip it without reading it: a pass caused by other queues'
	// traffic does not walk a throttled backlog again.
	stalled bool
	wake    time.Time
	walks   int // picks run over the queue (what a stall saves; tests read it)
}

// queue is name's policy state, created on first use (p.mu held).
func (p *policy) queue(name string) *queuePolicy {
	qp := p.queues[name]
	if qp == nil {
		qp = &queuePolicy{}
		p.queues[name] = qp
	}
	return qp
}

// deliver picks for every queue with consumers, up to budget grants, and
// hands the picks to the pipeline (policy.mu and the state's read lock
// held).
func (t *term) deliver(v fsm.View, ps *passState, budget int) {
	p := t.policy
	// Every queue that changed may have something deliverable again,
	// whether or not it has consumers now.
	for name := range ps.dirty {
		if qp := p.queues[name]; qp != nil {
			qp.stalled = false
		}
	}
	p.names = t.reg.queueNames(p.names[:0])
	p.drop = p.drop[:0]
	n := len(p.names)
	if n == 0 {
		return
	}
	// The start rotates so a limited pipeline does not always favour the
	// alphabetically first queue.
	p.qrot = (p.qrot + 1) % n
	for i := range n {
		name := p.names[(p.qrot+i)%n]
		qv, ok := v.Queue(name)
		if !ok {
			p.drop = append(p.drop, name)
			continue
		}
		if budget <= 0 || qv.Ready() == 0 || qv.Paused() {
			continue
		}
		if qp := p.queues[name]; qp != nil && qp.stalled {
			if qp.wake.IsZero() || ps.now.Before(qp.wake) {
				if !qp.wake.IsZero() {
					ps.wakeAt(qp.wake)
				}
				continue
			}
			qp.stalled = false
		}
		budget -= t.selectQueue(v, qv, name, ps, budget)
	}
	for _, name := range p.drop {
		t.dropQueue(name)
	}
}

// selectQueue picks up to budget (message, consumer) pairs from one queue
// and appends their grants to the pipeline's batch. It returns how many it
// picked (policy.mu and the state's read lock held).
func (t *term) selectQueue(v fsm.View, qv QueueView, name string, ps *passState, budget int) int {
	p := t.policy
	cs := &p.cs
	if t.reg.credit(v, name, ps, cs) == 0 {
		return 0
	}
	qp := p.queue(name)
	return t.pipe.pickAndGrant(qv, name, cs, ps, budget, qp, &p.sc)
}

// dropQueue forgets a deleted queue and ends its consumers.
func (t *term) dropQueue(name string) {
	t.reg.drop(name, fmt.Errorf("%w: %s (deleted while this consumer was attached)", fsm.ErrQueueNotFound, name))
	t.pipe.drop(name)
	delete(t.policy.queues, name)
}

// grantFor builds the grant of one pick.
func grantFor(queue string, id uint64, c *Consumer, queueVisMs, nowMs int64) *fsmv1.Grant {
	vis := c.visibilityMs
	if vis <= 0 {
		vis = queueVisMs
	}
	// The name goes into the log for the message's attempt history
	// (log version 18; older entries ignore it).
	return &fsmv1.Grant{Queue: queue, MessageId: id, ConsumerId: c.id, ConsumerName: c.name, DeadlineMs: nowMs + vis}
}
