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
}

// Consumer is one registered Lease stream. Deliveries carries its messages
// (already leased to it); Done closes when the stream is over, with Err
// saying why. Deliveries is never closed: select on Done too.
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
	limit        int // total deliveries wanted, 0 = unlimited
	ch           chan *state.Delivery
	done         chan struct{}
	err          error
	closeOnce    sync.Once

	// guarded by t.reg.mu
	pending   int // grants proposed to it, not yet handled
	delivered int // pushed to its buffer
	acked     int // acks received for its leases (Settling)
	ended     bool
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
		ch:           make(chan *state.Delivery, maxIF),
		done:         make(chan struct{}),
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

// MaxInFlight is the effective credit limit (and the Deliveries buffer).
func (c *Consumer) MaxInFlight() int { return c.max }

// Deliveries carries leased messages; its buffer holds exactly MaxInFlight.
func (c *Consumer) Deliveries() <-chan *state.Delivery { return c.ch }

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
// full (a lease of a buffered delivery expired and its credit was reused).
func (c *Consumer) push(d *state.Delivery) bool {
	if c.ended {
		return false
	}
	select {
	case c.ch <- d:
		return true
	default:
		return false
	}
}

// drainUnsent empties the buffer of deliveries the stream never sent
// (only after the consumer ended, so nothing more is pushed) and appends
// them to refs.
func (c *Consumer) drainUnsent(refs []*fsmv1.Ref) []*fsmv1.Ref {
	for {
		select {
		case d := <-c.ch:
			refs = append(refs, &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken})
		default:
			return refs
		}
	}
}
