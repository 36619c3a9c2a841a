package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
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

// ErrLimitReached is the Err of a consumer with a Limit that was pushed
// that many deliveries and holds none of them any more (each acked,
// nacked, released or expired): the stream has nothing left to do and
// ends normally.
var ErrLimitReached = errors.New("scheduler: consumer limit reached and settled")

// Proposer submits a command to Raft. Propose blocks until the entry is
// committed and applied (or fails) and returns the FSM's Result. The
// scheduler sets cmd.NowMs from its Clock before proposing.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error)
}

// State is the replicated state the scheduler reads (fsm.Reader): fn runs
// under the state's read lock and must not block.
type State interface {
	Read(fn func(v fsm.View))
	// ClusterVersion is the log version entries are proposed under: acks
	// carry grants only from fsm.AckGrantVersion on (CarryAck).
	ClusterVersion() uint32
}

// Config tunes a Scheduler. Zero values take the defaults.
type Config struct {
	Logger *slog.Logger
	// Clock is the node's clock (nil = RealClock()).
	Clock Clock
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
	// HandBack receives deliveries granted while this node led that no
	// stream took and that the scheduler could not roll back itself
	// because its term ended (leadership moved): they were never sent, so
	// whoever leads now may hand them back uncounted (an unprocessed Nack
	// names exactly these leases). Grants whose proposal ended with its
	// outcome unknown (leadership lost while the entry was in flight: it
	// may commit in the next term) come here too, by the tokens they
	// carry. It must not block. nil: they expire on the next leader as
	// counted attempts (a term that still runs rolls back lost grants
	// itself).
	HandBack func(refs []*fsmv1.Ref)
	// CarryGrants lets ack entries carry the grants of the credit they
	// free (CarryAck; from cluster version 10): one entry per delivery
	// cycle instead of two. Off by default: on this project's loaded
	// machine it cut entries per delivery but no speed-up could be shown
	// (docs/benchmarks.md); on until measured on a quiet one.
	CarryGrants bool
	// Jitter draws the retry policy's jitter, uniform in [0, 1) (nil =
	// math/rand/v2); tests fix it to check exact delays.
	Jitter func() float64
}

// Scheduler delivers messages to consumers while its node leads. It is safe
// for concurrent use; RunLeader must not run twice at once.
//
// Locking (see DESIGN.md): s.mu guards only which term is current; each
// term's parts have their own locks, always taken in the order
// policy.mu → the state's read lock → pipeline.mu → registry.mu, and
// never held across a proposal.
type Scheduler struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	state State
	p     Proposer

	startNanos int64
	nextSeq    atomic.Uint64 // consumer registration sequence, never reset

	leading atomic.Bool
	wake    chan struct{}

	mu    sync.Mutex
	cur   *term // nil while not leading
	terms uint64
}

// term is the scheduler's state for one leadership term: the next term
// starts from nothing (all of it is soft state).
type term struct {
	n        uint64
	ctx      context.Context
	anchor   time.Time // term start; origin of the token buckets' time
	graceEnd time.Time // anchor + LeaseGrace
	// graceFromMs is anchor - LeaseGrace: a lease whose deadline is at or
	// before it gets no grace from this term (see inGrace).
	graceFromMs int64
	wg          sync.WaitGroup // background proposals of the term
	kick        func()
	// over is set (under policy.mu) once the loop has returned: a carry
	// pass then starts nothing, because RunLeader waits on wg.
	over bool

	reg    *registry
	pipe   *pipeline
	sweep  *sweeper
	policy *policy

	// dirty are the queues changed since the last pass took them: a
	// stalled queue (deliver.go) is read again only once it is here.
	dirtyMu sync.Mutex
	dirty   map[string]struct{}
}

// changed records that queues changed (an applied entry touched them, or
// pending marks were freed) and wakes the loop.
func (t *term) changed(queues []string) {
	t.dirtyMu.Lock()
	if t.dirty == nil {
		t.dirty = map[string]struct{}{}
	}
	for _, q := range queues {
		t.dirty[q] = struct{}{}
	}
	t.dirtyMu.Unlock()
	t.kick()
}

// takeDirty returns the queues changed since the last call.
func (t *term) takeDirty() map[string]struct{} {
	t.dirtyMu.Lock()
	defer t.dirtyMu.Unlock()
	d := t.dirty
	t.dirty = nil
	return d
}

// inGrace reports whether the term's grace period keeps a lease with
// deadline dlMs from expiring before graceEnd. It covers leases whose
// deadline passed less than one grace period before the term began (their
// holders may have been cut off by the election) and those falling due
// during the grace; a lease whose deadline had passed by a grace period or
// more when the term began gets none. Every term grants a grace, so
// without that bound leadership moving more often than LeaseGrace would
// keep such leases forever; with it, no lease outlives its deadline by
// more than 2×LeaseGrace once a term can commit (DESIGN.md, Time).
func (t *term) inGrace(dlMs int64) bool {
	return dlMs > t.graceFromMs && time.UnixMilli(dlMs).Before(t.graceEnd)
}

// goTerm runs f on a background goroutine of the term and wakes the loop
// when it is done.
func (t *term) goTerm(f func(ctx context.Context)) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f(t.ctx)
		t.kick()
	}()
}

// New returns a scheduler over state that proposes through p. Pass it the
// FSM's change notices (fsm.Options.Notifier, through the composition
// root's feed) so applied changes wake it.
func New(cfg Config, state State, p Proposer) *Scheduler {
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
	if !s.leading.Load() {
		return
	}
	if t := s.current(); t != nil {
		t.changed(queues)
		return
	}
	s.kick()
}

func (s *Scheduler) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// current is the running term, or nil.
func (s *Scheduler) current() *term {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// newTerm builds the parts of a term; they start empty.
func (s *Scheduler) newTerm(ctx context.Context, n uint64, now time.Time) *term {
	t := &term{
		n: n, ctx: ctx, anchor: now, kick: s.kick,
		graceEnd:    now.Add(s.cfg.LeaseGrace),
		graceFromMs: now.Add(-s.cfg.LeaseGrace).UnixMilli(),
	}
	t.reg = newRegistry()
	t.pipe = newPipeline(s, t)
	t.sweep = &sweeper{s: s, t: t}
	t.policy = &policy{queues: map[string]*queuePolicy{}}
	return t
}

// RunLeader runs the delivery loop and the lease sweeper until ctx is done,
// then ends every consumer with ErrNotLeader, drops pending marks and waits
// for its goroutines. What its consumers' buffers still held, and what
// grants completing after the end could not push, goes to
// Config.HandBack. Call it when the node becomes leader (after a Barrier)
// with a context cancelled when leadership is lost.
func (s *Scheduler) RunLeader(ctx context.Context) {
	s.mu.Lock()
	if s.cur != nil {
		s.mu.Unlock()
		s.log.Error("RunLeader called while already running")
		return
	}
	s.terms++
	t := s.newTerm(ctx, s.terms, s.clock.Now())
	s.cur = t
	s.mu.Unlock()
	s.leading.Store(true)
	// stint counts this node's times as leader; it is not the Raft term
	// (which cluster logs as "term"), so it must not be called one.
	s.log.Info("scheduler started", "stint", t.n, "lease_grace", s.cfg.LeaseGrace)

	s.loop(t)

	t.policy.mu.Lock()
	t.over = true
	t.policy.mu.Unlock()
	s.leading.Store(false)
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
	n, unsent := t.reg.close(ErrNotLeader)
	s.handBack(unsent)
	t.wg.Wait()
	t.pipe.dropAll()
	select {
	case <-s.wake:
	default:
	}
	s.log.Info("scheduler stopped", "stint", t.n, "consumers_ended", n)
}

// loop runs passes until the term ends. It sleeps on one channel (kicks)
// and one timer for the earliest instant a pass said it has work.
func (s *Scheduler) loop(t *term) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if t.ctx.Err() != nil {
			return
		}
		if next := s.pass(t); !next.IsZero() {
			d := next.Sub(s.clock.Now())
			if d <= 0 {
				continue
			}
			timer.Reset(d)
		} else {
			timer.Stop()
		}
		select {
		case <-t.ctx.Done():
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// passState is what one pass knows of time and what it learns of when to
// come back.
type passState struct {
	dirty map[string]struct{} // queues changed since the previous pass
	// settlingFree: leases whose acks are settling free their consumer's
	// credit in this pass (registry.credit). True for a carry pass and,
	// while acks do not carry grants, for the loop's.
	settlingFree bool
	now          time.Time
	nowMs        int64
	nowNs        float64   // since the term's anchor
	anchor       time.Time // the term's bucket clock origin
	wake         time.Time
}

func (ps *passState) wakeAt(t time.Time) {
	if ps.wake.IsZero() || t.Before(ps.wake) {
		ps.wake = t
	}
}

// pass makes one scheduling pass over every queue with consumers, launches
// the grants, ticks and expiries due, and returns when it next has work
// (zero: only an event can create work).
func (s *Scheduler) pass(t *term) time.Time {
	// Taken before the state is read: a change applied after this is
	// seen by the next pass, which its notice wakes.
	dirty := t.takeDirty()
	now := s.clock.Now()
	ps := passState{dirty: dirty, now: now, nowMs: now.UnixMilli(), nowNs: float64(now.Sub(t.anchor)), anchor: t.anchor, settlingFree: !s.carrying()}
	t.policy.mu.Lock()
	defer t.policy.mu.Unlock()
	budget, until := t.pipe.budget(now)
	if !until.IsZero() {
		ps.wakeAt(until)
	}
	s.state.Read(func(v fsm.View) {
		t.deliver(v, &ps, budget)
		t.sweep.due(v, &ps)
		t.reg.endSatisfied(v)
	})
	t.pipe.flush()
	return ps.wake
}

// propose stamps the command with the clock and proposes it.
func (s *Scheduler) propose(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	cmd.NowMs = s.clock.Now().UnixMilli()
	return s.p.Propose(ctx, cmd)
}

// handBack passes deliveries that were never sent, and that a term that
// ended could not roll back, to Config.HandBack.
func (s *Scheduler) handBack(refs []*fsmv1.Ref) {
	if len(refs) == 0 {
		return
	}
	if s.cfg.HandBack == nil {
		s.log.Debug("deliveries never sent left to expire", "leases", len(refs))
		return
	}
	s.cfg.HandBack(refs)
}

func (s *Scheduler) logProposeErr(what string, err error, args ...any) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s.log.Debug(what+" not applied", append(args, "err", err)...)
		return
	}
	s.log.Warn(what+" failed", append(args, "err", err)...)
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
