package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// Defaults and limits.
const (
	DefaultLeaseGrace        = 5 * time.Second
	DefaultMaxGrantBatch     = 256
	DefaultMaxInFlightGrants = 4
	DefaultMaxInFlight       = 64     // per consumer, when the request says 0
	MaxMaxInFlight           = 10_000 // larger requests are capped
	// MaxKeyStats bounds the fairness keys KeyStats reports.
	MaxKeyStats = 10_000

	// throttleLookahead is how many throttled messages of one fairness key
	// a pass steps over looking for a deliverable one behind them: a
	// bound on the work of a pass, and so on how deep inside one key an
	// unthrottled message can be found behind throttled ones.
	throttleLookahead = 1024
	// maxExpireBatch is the most leases one LeaseExpire command names.
	maxExpireBatch = 1024
	// releaseTimeout bounds the ReleaseConsumer proposal of Consumer.Close.
	releaseTimeout = 10 * time.Second
	// bufferRecheck: how soon to look again at a consumer whose buffer
	// holds deliveries whose leases already ended (a stalled stream).
	bufferRecheck = 100 * time.Millisecond
	minBackoff    = 10 * time.Millisecond
	maxBackoff    = time.Second
)

// ErrNotLeader: Register on a node that is not running as leader, and the
// error of streams ended because leadership was lost.
var ErrNotLeader = errors.New("scheduler: not the leader")

// ErrClosed is the Err of a consumer its owner closed.
var ErrClosed = errors.New("scheduler: consumer closed")

// Proposer submits a command to Raft. Propose blocks until the entry is
// committed and applied (or fails) and returns the FSM's Result. The
// scheduler sets cmd.NowMs from its Clock before proposing.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmv1.Command) (*fsm.Result, error)
}

// Config tunes a Scheduler. Zero values take the defaults.
type Config struct {
	Logger *slog.Logger
	Clock  Clock
	// NodeID makes consumer ids unique across leaders:
	// "<node>-<startNanos>-<seq>".
	NodeID string
	// LeaseGrace: after becoming leader, wait this long before expiring
	// any lease, so consumers of the old leader can reconnect and ack
	// (0 = 5s; negative = no grace).
	LeaseGrace time.Duration
	// MaxGrantBatch is the most grants in one LeaseGrant command (0 = 256).
	MaxGrantBatch int
	// MaxInFlightGrants is the most LeaseGrant proposals outstanding at
	// once (0 = 4).
	MaxInFlightGrants int
}

// Scheduler delivers messages to consumers while its node leads. It is safe
// for concurrent use; RunLeader must not run twice at once.
type Scheduler struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	state *fsm.FSM
	p     Proposer

	startNanos int64
	nextSeq    atomic.Uint64 // consumer registration sequence, never reset

	leading atomic.Bool
	wake    chan struct{}
	wakeGen atomic.Uint64 // bumped by every kick (tests use it to detect quiescence)

	mu sync.Mutex // guards everything below
	// term state, valid while running
	running   bool
	term      uint64
	ctx       context.Context
	anchor    time.Time // leadership start; bucket clock origin
	graceEnd  time.Time
	queues    map[string]*queueSched
	qnames    []string // sorted keys of queues
	qrot      int      // rotating start of the pass over queues
	inflight  int      // LeaseGrant proposals outstanding
	batch     []*fsmv1.Grant
	batchTo   []grantTarget
	lastBatch chan struct{} // closed when the latest launched batch has been handled
	active    int           // background goroutines alive (tests)

	grantBackoff, tickBackoff, expireBackoff backoff
	tickBusy, expireBusy                     bool
	lastTickMs                               int64

	// loop parking, for tests (quiescent)
	parked    bool
	parkedGen uint64
	parkedAt  time.Time

	wg sync.WaitGroup // background goroutines of the current term

	ps passState // scratch reused by every pass
}

type backoff struct {
	until time.Time
	d     time.Duration
}

func (b *backoff) fail(now time.Time) {
	b.d = min(max(b.d*2, minBackoff), maxBackoff)
	b.until = now.Add(b.d)
}

func (b *backoff) ok() { b.d, b.until = 0, time.Time{} }

// queueSched is the scheduler's per-queue state for one term.
type queueSched struct {
	name      string
	consumers []*Consumer // by registration sequence
	rrLast    uint64      // seq of the consumer that got the latest grant
	levels    map[int32]*drrLevel
	buckets   map[string]*bucket
	cfg       *fsmv1.QueueConfig  // the config buckets were last synced with
	pending   map[uint64]struct{} // message ids in uncommitted grants
	credit    []int               // scratch, parallel to consumers
}

// drrLevel is the deficit round-robin cursor of one priority: the key in
// service (by activation seq) and what it may still send this round.
type drrLevel struct {
	seq     uint64
	key     string
	deficit int64
}

type grantTarget struct {
	qs *queueSched
	c  *Consumer
}

// New returns a scheduler over state that proposes through p. Install it
// as state's notifier (state.SetNotifier) so applied changes wake it.
func New(cfg Config, state *fsm.FSM, p Proposer) *Scheduler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock()
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "node"
	}
	if cfg.LeaseGrace == 0 {
		cfg.LeaseGrace = DefaultLeaseGrace
	} else if cfg.LeaseGrace < 0 {
		cfg.LeaseGrace = 0
	}
	if cfg.MaxGrantBatch <= 0 {
		cfg.MaxGrantBatch = DefaultMaxGrantBatch
	}
	if cfg.MaxInFlightGrants <= 0 {
		cfg.MaxInFlightGrants = DefaultMaxInFlightGrants
	}
	return &Scheduler{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "scheduler"),
		clock:      cfg.Clock,
		state:      state,
		p:          p,
		startNanos: cfg.Clock.Now().UnixNano(),
		wake:       make(chan struct{}, 1),
	}
}

var _ fsm.Notifier = (*Scheduler)(nil)

// QueuesChanged implements fsm.Notifier: a non-blocking, coalescing wakeup
// of the loop. It does nothing unless the scheduler is leading.
func (s *Scheduler) QueuesChanged(queues []string) {
	if s.leading.Load() {
		s.kick()
	}
}

func (s *Scheduler) kick() {
	s.wakeGen.Add(1)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// RunLeader runs the delivery loop and the lease sweeper until ctx is done,
// then ends every consumer with ErrNotLeader, drops pending marks and waits
// for its goroutines. Call it when the node becomes leader (after a
// Barrier) with a context cancelled when leadership is lost.
func (s *Scheduler) RunLeader(ctx context.Context) {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		s.log.Error("RunLeader called while already running")
		return
	}
	now := s.clock.Now()
	s.running = true
	s.term++
	s.ctx = ctx
	s.anchor = now
	s.graceEnd = now.Add(s.cfg.LeaseGrace)
	s.queues = map[string]*queueSched{}
	s.qnames = nil
	s.inflight = 0
	s.batch, s.batchTo = nil, nil
	s.lastBatch = make(chan struct{})
	close(s.lastBatch)
	s.grantBackoff, s.tickBackoff, s.expireBackoff = backoff{}, backoff{}, backoff{}
	s.tickBusy, s.expireBusy, s.lastTickMs = false, false, 0
	term := s.term
	s.mu.Unlock()
	s.leading.Store(true)
	s.log.Info("scheduler started", "term", term, "lease_grace", s.cfg.LeaseGrace)

	s.loop(ctx)

	s.leading.Store(false)
	s.mu.Lock()
	s.running = false
	n := 0
	for _, name := range s.qnames {
		for _, c := range s.queues[name].consumers {
			c.end(ErrNotLeader)
			n++
		}
	}
	s.queues, s.qnames = nil, nil
	s.batch, s.batchTo = nil, nil
	s.parked = false
	s.mu.Unlock()
	s.wg.Wait()
	select {
	case <-s.wake:
	default:
	}
	s.log.Info("scheduler stopped", "term", term, "consumers_ended", n)
}

func (s *Scheduler) loop(ctx context.Context) {
	timer := s.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		gen := s.wakeGen.Load()
		next := s.pass()
		if !next.IsZero() {
			d := next.Sub(s.clock.Now())
			if d <= 0 {
				continue
			}
			timer.Reset(d)
			// A fake clock may have moved between reading it and arming
			// the timer; never sleep past an instant already reached.
			if !s.clock.Now().Before(next) {
				timer.Stop()
				continue
			}
		} else {
			timer.Stop()
		}
		s.mu.Lock()
		s.parked, s.parkedGen, s.parkedAt = true, gen, next
		s.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timer.C():
		}
		s.mu.Lock()
		s.parked = false
		s.mu.Unlock()
	}
}

// quiescent reports whether the scheduler has nothing left to do until the
// state, the consumers or the clock change (tests).
func (s *Scheduler) quiescent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.parked || s.parkedGen != s.wakeGen.Load() || s.active > 0 || s.inflight > 0 || s.tickBusy || s.expireBusy {
		return false
	}
	return s.parkedAt.IsZero() || s.clock.Now().Before(s.parkedAt)
}

// passState is the scratch of one pass.
type passState struct {
	now    time.Time
	nowMs  int64
	nowNs  float64   // since anchor
	anchor time.Time // the term's bucket clock origin
	wake   time.Time
	prios  []int32
	cursor map[string]keyCursor // per level: how far each key was scanned this pass
	bs     []*bucket
	drop   []*queueSched
}

type keyCursor struct {
	after uint64 // every ready id <= after is pending, taken or throttled
	skips int    // throttled messages stepped over
	done  bool   // nothing more to take from this key this pass
}

func (ps *passState) wakeAt(t time.Time) {
	if ps.wake.IsZero() || t.Before(ps.wake) {
		ps.wake = t
	}
}

// pass makes one scheduling pass over every queue with consumers, launches
// the grants, ticks and expiries due, and returns when it next has work
// (zero: only an event can create work).
func (s *Scheduler) pass() time.Time {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return time.Time{}
	}
	ps := &s.ps
	ps.now, ps.nowMs, ps.nowNs, ps.anchor, ps.wake = now, now.UnixMilli(), float64(now.Sub(s.anchor)), s.anchor, time.Time{}
	if ps.cursor == nil {
		ps.cursor = map[string]keyCursor{}
	}
	s.state.Read(func(v fsm.View) {
		s.deliver(v, ps)
		s.timeWork(v, ps)
	})
	s.flush()
	return ps.wake
}

func (s *Scheduler) deliver(v fsm.View, ps *passState) {
	budget := (s.cfg.MaxInFlightGrants-s.inflight)*s.cfg.MaxGrantBatch - len(s.batch)
	if ps.now.Before(s.grantBackoff.until) {
		ps.wakeAt(s.grantBackoff.until)
		budget = 0
	}
	ps.drop = ps.drop[:0]
	n := len(s.qnames)
	if n == 0 {
		return
	}
	s.qrot = (s.qrot + 1) % n
	for i := range n {
		qs := s.queues[s.qnames[(s.qrot+i)%n]]
		qv, ok := v.Queue(qs.name)
		if !ok {
			ps.drop = append(ps.drop, qs)
			continue
		}
		if budget <= 0 || len(qs.consumers) == 0 || qv.Ready() == 0 {
			continue
		}
		budget -= s.selectQueue(v, qv, qs, ps, budget)
	}
	for _, qs := range ps.drop {
		s.dropQueue(qs)
	}
}

// dropQueue forgets a deleted queue and ends its consumers.
func (s *Scheduler) dropQueue(qs *queueSched) {
	for _, c := range qs.consumers {
		c.end(fsm.ErrQueueNotFound)
	}
	qs.consumers = nil
	delete(s.queues, qs.name)
	if i, ok := slices.BinarySearch(s.qnames, qs.name); ok {
		s.qnames = slices.Delete(s.qnames, i, i+1)
	}
	s.log.Debug("queue gone; its consumers ended", "queue", qs.name)
}

// timeWork proposes a Tick when a delayed message or TTL is due and a
// LeaseExpire when leases are past their deadline (after the grace period),
// or notes when that will be.
func (s *Scheduler) timeWork(v fsm.View, ps *passState) {
	if !s.tickBusy {
		if due, ok := v.NextDue(); ok {
			switch {
			case due > ps.nowMs:
				ps.wakeAt(time.UnixMilli(due))
			case due <= s.lastTickMs:
				// A tick at or after due already applied: nothing to gain
				// from proposing another (and no spinning).
			case ps.now.Before(s.tickBackoff.until):
				ps.wakeAt(s.tickBackoff.until)
			default:
				s.launchTick(ps.nowMs)
			}
		}
	}
	if !s.expireBusy {
		if dl, ok := v.NextLeaseDeadline(); ok {
			at := time.UnixMilli(dl)
			if at.Before(s.graceEnd) {
				at = s.graceEnd
			}
			if at.Before(s.expireBackoff.until) {
				at = s.expireBackoff.until
			}
			if ps.now.Before(at) {
				ps.wakeAt(at)
			} else if refs := v.ExpiredLeases(ps.nowMs, maxExpireBatch); len(refs) > 0 {
				s.launchExpire(refs)
			}
		}
	}
}

// Settling is told, before acks are proposed, which leases they settle. A
// consumer that acked a message is done with it, so from now until the ack
// applies that lease stops counting against its credit: the next grant is
// proposed alongside the ack instead of after its commit, which takes one
// of the two commits out of every delivery cycle. Only leases the view
// shows held under the ref's token count; done forgets them and must be
// called once the acks have been applied or have failed. A failed ack
// leaves the lease counted again: the consumer was over its credit by at
// most the leases of that ack, for as long as it took.
func (s *Scheduler) Settling(refs []*fsmv1.Ref) (done func()) {
	type mark struct {
		c  *Consumer
		id uint64
	}
	var marks []mark
	s.mu.Lock()
	if s.running {
		s.state.Read(func(v fsm.View) {
			for _, r := range refs {
				holder, token, ok := v.Lease(r.GetQueue(), r.GetMessageId())
				if !ok || token != r.GetLeaseToken() {
					continue
				}
				qs := s.queues[r.GetQueue()]
				if qs == nil {
					continue
				}
				for _, c := range qs.consumers {
					if c.id != holder {
						continue
					}
					if c.settling == nil {
						c.settling = map[uint64]struct{}{}
					}
					c.settling[r.GetMessageId()] = struct{}{}
					marks = append(marks, mark{c, r.GetMessageId()})
					break
				}
			}
		})
	}
	s.mu.Unlock()
	if len(marks) == 0 {
		return func() {}
	}
	s.kick()
	return func() {
		s.mu.Lock()
		for _, m := range marks {
			delete(m.c.settling, m.id)
		}
		s.mu.Unlock()
	}
}

// Consumers is the number of consumers registered on queue.
func (s *Scheduler) Consumers(queue string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if qs := s.queues[queue]; qs != nil {
		return len(qs.consumers)
	}
	return 0
}

// KeyStats describes a queue's fairness keys (ready messages, the DRR
// deficit of the key in service, weight; at most MaxKeyStats keys, highest
// priority first, then in activation order) and its throttle buckets (one
// per rule; a rule never used yet shows a full bucket).
func (s *Scheduler) KeyStats(queue string) (keys []*raftqv1.FairnessKeyStats, throttles []*raftqv1.ThrottleKeyStats) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var qs *queueSched
	if s.running {
		qs = s.queues[queue]
	}
	s.state.Read(func(v fsm.View) {
		qv, ok := v.Queue(queue)
		if !ok {
			return
		}
		byKey := map[string]*raftqv1.FairnessKeyStats{}
		var prios []int32
		for _, p := range qv.Priorities(prios) {
			var L *drrLevel
			if qs != nil {
				L = qs.levels[p]
			}
			for k, ok := qv.NextKey(p, 0); ok; k, ok = qv.NextKey(p, k.Seq) {
				st := byKey[k.Key]
				if st == nil {
					if len(keys) >= MaxKeyStats {
						break
					}
					st = &raftqv1.FairnessKeyStats{Key: k.Key, Weight: k.Weight}
					byKey[k.Key] = st
					keys = append(keys, st)
				}
				st.Pending += int64(k.Ready)
				if L != nil && L.seq == k.Seq {
					st.Deficit += L.deficit
				}
			}
		}
		rules := qv.Config().GetThrottles()
		names := make([]string, 0, len(rules))
		for k := range rules {
			names = append(names, k)
		}
		slices.Sort(names)
		nowNs := float64(now.Sub(s.anchor))
		for _, k := range names {
			r := rules[k]
			st := &raftqv1.ThrottleKeyStats{Key: k, RatePerSec: r.GetRatePerSec(), Burst: max(r.GetBurst(), 1), Tokens: float64(max(r.GetBurst(), 1))}
			if qs != nil {
				if b := qs.buckets[k]; b != nil {
					b.setRule(r, nowNs, false)
					st.Tokens = b.tokens(nowNs)
				}
			}
			throttles = append(throttles, st)
		}
	})
	return keys, throttles
}
