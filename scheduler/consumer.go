package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// ConsumerRequest describes a Lease stream.
type ConsumerRequest struct {
	Queue string
	Name  string
	// MaxInFlight is the most unacked deliveries (0 = 64; capped at
	// MaxMaxInFlight).
	MaxInFlight int
	// VisibilityTimeout is the lease length (0 = the queue's).
	VisibilityTimeout time.Duration
	// Limit ends granting after this many deliveries on the stream (0 =
	// no limit), so a consumer that wants N messages is never handed
	// extras whose return would count as attempts.
	Limit int
	// Address and Identity describe the stream's client for
	// ListConsumers: its peer address and authenticated identity.
	Address, Identity string
	// Gone, when set, closes when the stream is over (its context's
	// Done): from then on the consumer is granted nothing, as after Stop.
	// It is read as grants are picked, so a stream whose end has been
	// read gets nothing more even before its handler has called Stop.
	Gone <-chan struct{}
}

// Consumer is one registered Lease stream. Its buffer holds its messages
// (already leased to it) until the stream takes them (Ready, Take); Done
// closes when the stream is over, with Err saying why.
type Consumer struct {
	s            *Scheduler
	t            *term // the term it registered in
	id           string
	queue, name  string
	addr, ident  string
	connected    time.Time
	seq          uint64
	max          int
	visibilityMs int64
	limit        int           // total deliveries wanted, 0 = unlimited
	ready        chan struct{} // capacity 1: a delivery was pushed (Ready)
	done         chan struct{}
	gone         <-chan struct{} // ConsumerRequest.Gone; nil = never
	err          error
	closeOnce    sync.Once

	// guarded by t.reg.mu
	// buf holds the deliveries pushed and not yet taken by the stream, in
	// push order (at most max).
	buf []*state.Delivery
	// lapsed are deliveries taken out of buf unsent because their lease
	// lapsed first: they are rolled back uncounted (registry.takeLapsed,
	// or Close); rolling counts those in a rollback still in flight.
	lapsed    []*fsmv1.Ref
	rolling   int
	pending   int // grants proposed to it, not yet handled
	delivered int // pushed to its buffer, less those that lapsed there
	acked     int // acks received for its leases (Settling)
	ended     bool
	// stopped: Stop was called; it is granted nothing more.
	stopped bool
	// closing: Close waits for its pending grants (quiet closes when the
	// last is handled) and rolls back what they granted (unpushed) itself,
	// before its ReleaseConsumer. See Close.
	closing  bool
	quiet    chan struct{}
	unpushed []*fsmv1.Ref
	// settling holds ids of its leases whose acks are being committed
	// (Scheduler.Settling): settled from the consumer's side.
	settling map[uint64]struct{}
}

// Register adds a consumer to a queue's round-robin. ctx bounds only the
// registration: the consumer lives until Close or until the scheduler ends
// it. It fails with ErrNotLeader when the scheduler is not running and with
// fsm.ErrQueueNotFound when the queue does not exist.
func (s *Scheduler) Register(ctx context.Context, req ConsumerRequest) (*Consumer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := fsm.ValidateQueueName(req.Queue); err != nil {
		return nil, err
	}
	maxIF := req.MaxInFlight
	if maxIF <= 0 {
		maxIF = DefaultMaxInFlight
	}
	maxIF = min(maxIF, MaxMaxInFlight)
	var vis int64
	if req.VisibilityTimeout > 0 {
		vis = min(max(req.VisibilityTimeout.Milliseconds(), 1), fsm.MaxDurationMs)
	}
	t := s.current()
	if t == nil {
		return nil, ErrNotLeader
	}
	exists := false
	s.state.Read(func(v fsm.View) { _, exists = v.Queue(req.Queue) })
	if !exists {
		return nil, fmt.Errorf("%w: %s", fsm.ErrQueueNotFound, req.Queue)
	}
	seq := s.nextSeq.Add(1)
	c := &Consumer{
		s:            s,
		t:            t,
		id:           fmt.Sprintf("%s-%d-%d", s.cfg.NodeID, s.startNanos, seq),
		queue:        req.Queue,
		name:         req.Name,
		addr:         req.Address,
		ident:        req.Identity,
		connected:    s.clock.Now(),
		seq:          seq,
		max:          maxIF,
		visibilityMs: vis,
		limit:        max(req.Limit, 0),
		ready:        make(chan struct{}, 1),
		done:         make(chan struct{}),
		gone:         req.Gone,
	}
	if err := t.reg.add(c); err != nil {
		return nil, err
	}
	s.kick()
	s.log.Debug("consumer registered", "queue", req.Queue, "consumer", c.id, "name", req.Name, "max_in_flight", maxIF)
	return c, nil
}

// ID is the leader-assigned consumer id (what leases record).
func (c *Consumer) ID() string { return c.id }

// Queue is the queue the consumer reads.
func (c *Consumer) Queue() string { return c.queue }

// Name is the client-supplied consumer name.
func (c *Consumer) Name() string { return c.name }

// MaxInFlight is the effective credit limit (and the size of the buffer).
func (c *Consumer) MaxInFlight() int { return c.max }

// Ready receives a value after deliveries were pushed to the buffer: Take
// them then (a value may be left over from deliveries already taken).
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Buffered is the number of deliveries waiting in the buffer.
func (c *Consumer) Buffered() int {
	c.t.reg.mu.Lock()
	defer c.t.reg.mu.Unlock()
	return len(c.buf)
}

// Take hands the stream the deliveries at the head of the buffer, in
// order, for as long as fn accepts them (fn returning false leaves that
// delivery, and those after it, for the next Take). It returns how many
// fn took and whether the buffer still holds more.
//
// A delivery is only ever handed over while its lease is current: held
// by this consumer under its token, its deadline (on the leader's clock)
// not reached. One whose lease lapsed while it waited (a slow stream) was
// never sent, so it is not counted as an attempt: it is taken out and
// rolled back (the loop proposes the LeaseRollback, before any expiry of
// it); one whose lease ended otherwise is dropped. Neither counts against
// the consumer's Limit. fn runs under the scheduler's locks and must not
// block (project the delivery, size it, append it to the response).
func (c *Consumer) Take(fn func(d *state.Delivery) bool) (taken int, more bool) {
	s, r := c.s, c.t.reg
	lapsed := false
	s.state.Read(func(v fsm.View) {
		r.mu.Lock()
		defer r.mu.Unlock()
		var nowMs int64
		if len(c.buf) > 0 {
			nowMs = s.clock.Now().UnixMilli()
		}
		for len(c.buf) > 0 {
			d := c.buf[0]
			holder, token, ok := v.Lease(d.Queue, d.ID)
			current := ok && token == d.LeaseToken && holder == c.id
			if current && d.LeaseDeadlineMs > nowMs {
				if !fn(d) {
					more = true
					return
				}
				taken++
			} else {
				r.lapsedOne(c)
				if current {
					r.lapseLocked(c, d)
					lapsed = true
				}
			}
			c.buf[0] = nil
			c.buf = c.buf[1:]
		}
	})
	if lapsed {
		s.kick()
	}
	return taken, more
}

// TakeOne takes the delivery at the head of the buffer, as Take does.
func (c *Consumer) TakeOne() (*state.Delivery, bool) {
	var got *state.Delivery
	c.Take(func(d *state.Delivery) bool {
		if got != nil {
			return false
		}
		got = d
		return true
	})
	return got, got != nil
}

// Done is closed when the consumer has ended.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err says why the consumer ended (nil while it has not): ErrNotLeader,
// fsm.ErrQueueNotFound, or ErrClosed after Close.
func (c *Consumer) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Stop ends the consumer's credit: nothing more is granted to it, while
// what it holds stays leased to it until Close. A Lease stream that ends
// calls it before waiting for the acks and nacks that reached the node
// first: a hand-back among them (a client shutting down gives back what
// it never started) frees credit that a pass would otherwise fill again
// for a stream that is gone, and Close would release that as an attempt.
func (c *Consumer) Stop() {
	c.t.reg.mu.Lock()
	c.stopped = true
	c.t.reg.mu.Unlock()
}

// Close ends the stream: the consumer is unregistered and a ReleaseConsumer
// is proposed so its leases return at once. It is idempotent and bounded in
// time (it gives up on the proposals after a few seconds or when
// leadership ends; the leases then expire as usual).
//
// Only deliveries the stream may have sent may count as attempts. Raft
// applies in proposal order, so a release proposed while a grant to this
// consumer is still in flight would apply after that grant and count a
// delivery nobody was handed. Close therefore first waits until every grant
// proposed to the consumer has been handled (no new ones are made once it
// is unregistered), then rolls back in one LeaseRollback everything granted
// to it that the stream never took (its buffer, and grants handled after
// it ended), and only then proposes the release: the rollback precedes the
// release in the log, so the release finds only sent deliveries.
func (c *Consumer) Close() {
	c.closeOnce.Do(func() {
		s, t := c.s, c.t
		quiet, live := t.reg.closeConsumer(c)
		if !live {
			return // ended by the scheduler, which took care of its buffer
		}
		s.kick()
		ctx, cancel := context.WithTimeout(t.ctx, releaseTimeout)
		defer cancel()
		select {
		case <-quiet:
		case <-ctx.Done():
			// A grant still unresolved: let the pipeline roll back what
			// it grants from now on; the release may count it.
		}
		if unsent := t.reg.takeUnsent(c); len(unsent) > 0 {
			if _, err := s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: unsent}}}); err != nil {
				s.logProposeErr("roll back unsent deliveries", err, "consumer", c.id)
				if t.ctx.Err() != nil {
					s.handBack(unsent) // the term ended meanwhile
				}
			}
			t.reg.unlapse(unsent)
		}
		res, err := fsm.As[*fsm.CountResult](s.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_ReleaseConsumer{ReleaseConsumer: &fsmv1.ReleaseConsumer{ConsumerId: c.id}}}))
		if err != nil {
			s.logProposeErr("release consumer", err, "consumer", c.id)
			return
		}
		s.log.Debug("consumer closed", "queue", c.queue, "consumer", c.id, "released", res.Count)
	})
}

// end marks c over with err (t.reg.mu held).
func (c *Consumer) end(err error) {
	if c.ended {
		return
	}
	c.ended = true
	c.err = err
	close(c.done)
}

// push hands a committed delivery to the stream without blocking (t.reg.mu
// held). It fails if the consumer is gone or, exceptionally, its buffer is
// full (a lease of a buffered delivery ended and its credit was reused).
func (c *Consumer) push(d *state.Delivery) bool {
	if c.ended || len(c.buf) >= c.max {
		return false
	}
	c.buf = append(c.buf, d)
	select {
	case c.ready <- struct{}{}:
	default:
	}
	return true
}

// drainUnsent empties the buffer, and the lapsed deliveries not yet being
// rolled back, of deliveries the stream never sent (only after the
// consumer ended, so nothing more is pushed) and appends them to refs.
func (c *Consumer) drainUnsent(refs []*fsmv1.Ref) []*fsmv1.Ref {
	for _, d := range c.buf {
		refs = append(refs, &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken})
	}
	clear(c.buf)
	c.buf = nil
	refs = append(refs, c.lapsed...)
	c.lapsed = nil
	return refs
}

// checkQuiet closes quiet, which Close waits on, once no grant to c is
// pending and none of its lapsed deliveries is being rolled back
// (t.reg.mu held).
func (c *Consumer) checkQuiet() {
	if c.pending == 0 && c.rolling == 0 && c.quiet != nil {
		close(c.quiet)
		c.quiet = nil
	}
}
