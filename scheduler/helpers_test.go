package scheduler

import (
	"context"
	"errors"
	"github.com/raftq/raftq/fsm/state"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitTimeout bounds every wait (in the bubble's fake time).
const waitTimeout = 10 * time.Second

// fakeProposer is a log applied in proposal order, as Raft applies it:
// Propose appends the command and waits for an applier goroutine to apply
// it to the FSM. A proposer that stops waiting (its context ends) does not
// take its entry back, as with Raft. hook, if set, runs at proposal time
// and may refuse the command (it is then never applied, like an Apply
// refused by a node that is not leader); it must not block. hold stops
// the applier before a chosen command, which holds every later one too.
type fakeProposer struct {
	f    *fsm.FSM
	hook atomic.Pointer[func(ctx context.Context, cmd *fsmv1.Command) error]
	// lose, if set, runs once a command has applied; an error it returns
	// is answered instead of the result, as Raft answers an entry whose
	// leader stepped down before it learned the entry committed
	// (ErrLeadershipLost: outcome unknown, though it did commit).
	lose  atomic.Pointer[func(cmd *fsmv1.Command) error]
	gate  atomic.Pointer[gate]
	count sync.Map // op type name -> *atomic.Int64
	// tokens draws lease tokens for grants proposed under log version 5
	// or later, as the broker's Propose does (a counter: unique, never 0).
	tokens atomic.Uint64

	mu    sync.Mutex
	log   []*entry // proposed, not applied yet
	more  chan struct{}
	stop  chan struct{}
	index uint64 // owned by the applier
}

type entry struct {
	cmd  *fsmv1.Command
	res  fsm.Result
	done chan struct{}
}

// gate holds the applier before the first command match accepts.
type gate struct {
	match   func(*fsmv1.Command) bool
	entered chan struct{}
	release chan struct{}
}

func newFakeProposer(f *fsm.FSM) *fakeProposer {
	p := &fakeProposer{f: f, more: make(chan struct{}, 1), stop: make(chan struct{})}
	return p
}

func (p *fakeProposer) setHook(h func(ctx context.Context, cmd *fsmv1.Command) error) {
	if h == nil {
		p.hook.Store(nil)
		return
	}
	p.hook.Store(&h)
}

func (p *fakeProposer) setLose(f func(cmd *fsmv1.Command) error) {
	if f == nil {
		p.lose.Store(nil)
		return
	}
	p.lose.Store(&f)
}

// loseOnce makes the first applied command match accepts answer
// errLeadershipLost instead of its result.
func (p *fakeProposer) loseOnce(match func(*fsmv1.Command) bool) {
	var once atomic.Bool
	p.setLose(func(cmd *fsmv1.Command) error {
		if match(cmd) && once.CompareAndSwap(false, true) {
			return errLeadershipLost
		}
		return nil
	})
}

// hold makes the applier stop before the next command match accepts (and
// so before every command proposed after it) until release is closed.
// entered closes when the applier has stopped there.
func (p *fakeProposer) hold(match func(*fsmv1.Command) bool) (entered <-chan struct{}, release chan<- struct{}) {
	g := &gate{match: match, entered: make(chan struct{}), release: make(chan struct{})}
	p.gate.Store(g)
	return g.entered, g.release
}

// run applies the log in order until stop closes.
func (p *fakeProposer) run() {
	for {
		select {
		case <-p.stop:
			return
		case <-p.more:
		}
		for {
			p.mu.Lock()
			if len(p.log) == 0 {
				p.mu.Unlock()
				break
			}
			e := p.log[0]
			p.log = p.log[1:]
			p.mu.Unlock()
			if g := p.gate.Load(); g != nil && g.match(e.cmd) {
				p.gate.Store(nil)
				close(g.entered)
				select {
				case <-g.release:
				case <-p.stop:
					return
				}
			}
			p.index++
			e.res = p.f.ApplyCommand(p.index, e.cmd)
			close(e.done)
		}
	}
}

func opName(cmd *fsmv1.Command) string {
	switch cmd.Op.(type) {
	case *fsmv1.Command_LeaseGrant:
		return "grant"
	case *fsmv1.Command_Ack:
		if len(cmd.GetAck().GetGrants()) > 0 {
			return "ack+grant"
		}
		return "ack"
	case *fsmv1.Command_LeaseRollback:
		return "rollback"
	case *fsmv1.Command_LeaseExpire:
		return "expire"
	case *fsmv1.Command_ReleaseConsumer:
		return "release"
	case *fsmv1.Command_Tick:
		return "tick"
	}
	return "other"
}

func isOp(op string) func(*fsmv1.Command) bool {
	return func(cmd *fsmv1.Command) bool { return opName(cmd) == op }
}

func (p *fakeProposer) proposed(op string) int64 {
	v, ok := p.count.Load(op)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (p *fakeProposer) Propose(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h := p.hook.Load(); h != nil {
		if err := (*h)(ctx, cmd); err != nil {
			return nil, err
		}
	}
	// Stamped as the broker's Propose stamps it: the cluster version at
	// proposal time, and a lease token per grant from version 5.
	if v := p.f.Reader().ClusterVersion(); v > 1 && cmd.Version == 0 {
		cmd.Version = v
	}
	if cmd.Version >= fsm.AuthVersion {
		grants := cmd.GetLeaseGrant().GetGrants()
		if grants == nil {
			grants = cmd.GetAck().GetGrants()
		}
		for _, g := range grants {
			if g.LeaseToken == 0 {
				g.LeaseToken = p.tokens.Add(1)
			}
		}
	}
	v, _ := p.count.LoadOrStore(opName(cmd), new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	e := &entry{cmd: cmd, done: make(chan struct{})}
	p.mu.Lock()
	p.log = append(p.log, e)
	p.mu.Unlock()
	select {
	case p.more <- struct{}{}:
	default:
	}
	select {
	case <-e.done:
		if l := p.lose.Load(); l != nil {
			if err := (*l)(cmd); err != nil {
				return nil, err
			}
		}
		return e.res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// env is a leading scheduler over an FSM and a fake proposer. It must be
// built inside a synctest bubble (see bubble), where time is fake: it
// moves only when every goroutine of the bubble is blocked.
type env struct {
	t      testing.TB
	f      *fsm.FSM
	p      *fakeProposer
	s      *Scheduler
	term   *term // the running (or latest) term
	cancel context.CancelFunc
	done   chan struct{}
}

type envOpt func(*Config)

// bubble runs f in a synctest bubble.
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

// notifyFeed passes the FSM's change notices to the scheduler, as the
// composition root's feed does: the FSM, built first, is given the feed.
type notifyFeed struct{ to atomic.Pointer[Scheduler] }

func (n *notifyFeed) QueuesChanged(queues []string) {
	if s := n.to.Load(); s != nil {
		s.QueuesChanged(queues)
	}
}

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	feed := &notifyFeed{}
	f := fsm.New(fsm.Options{Logger: discard, Notifier: feed})
	p := newFakeProposer(f)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		p.run()
	}()
	cfg := Config{Logger: discard, NodeID: "n1", LeaseGrace: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	s := New(cfg, f.Reader(), p)
	feed.to.Store(s)
	e := &env{t: t, f: f, p: p, s: s}
	e.start()
	t.Cleanup(func() {
		e.stop()
		close(p.stop)
		<-applied
		if err := f.Integrity().Verify(); err != nil {
			t.Errorf("fsm.Verify: %v", err)
		}
	})
	return e
}

func (e *env) start() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		e.s.RunLeader(ctx)
	}()
	synctest.Wait()
	if e.term = e.s.current(); e.term == nil {
		e.t.Fatal("RunLeader did not start a term")
	}
}

// stop cancels RunLeader and waits for it to return.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case <-e.done:
		// Goroutines left behind would fail the bubble; grants still
		// counted as outstanding would be a leak of pipeline room.
		pl := e.term.pipe
		pl.mu.Lock()
		inflight := pl.inflight
		pl.mu.Unlock()
		if inflight != 0 {
			e.t.Errorf("RunLeader returned with %d grants outstanding", inflight)
		}
	case <-time.After(waitTimeout):
		e.t.Errorf("RunLeader did not return after cancel")
	}
	e.cancel = nil
}

// advance lets d of fake time pass, then waits until the scheduler has
// nothing left to do at the new instant.
func (e *env) advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// idle waits until every goroutine of the bubble is blocked: the scheduler
// has nothing left to do until the state, the consumers or the time change.
func (e *env) idle() { synctest.Wait() }

func (e *env) apply(cmd *fsmv1.Command) fsm.Result {
	e.t.Helper()
	cmd.NowMs = time.Now().UnixMilli()
	res, err := e.p.Propose(context.Background(), cmd)
	if err != nil {
		e.t.Fatalf("propose %T: %v", cmd.Op, err)
	}
	if res.Failure() != nil {
		e.t.Fatalf("apply %T: %v", cmd.Op, res.Failure())
	}
	return res
}

func (e *env) createQueue(name string, cfg *fsmv1.QueueConfig) {
	e.t.Helper()
	e.apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: cfg}}})
}

func (e *env) updateQueue(name string, cfg *fsmv1.QueueConfig, mask ...string) {
	e.t.Helper()
	e.apply(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: name, Config: cfg, Mask: mask}}})
}

func (e *env) enqueue(queue string, msgs ...*fsmv1.EnqueueMessage) []uint64 {
	e.t.Helper()
	res, err := fsm.As[*fsm.EnqueueResult](e.apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: queue, Messages: msgs}}}}}), nil)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	if res.Batches[0].Err != nil {
		e.t.Fatalf("enqueue: %v", res.Batches[0].Err)
	}
	return res.Batches[0].IDs
}

func (e *env) enqueueN(queue string, n int, tmpl *fsmv1.EnqueueMessage) []uint64 {
	e.t.Helper()
	msgs := make([]*fsmv1.EnqueueMessage, n)
	for i := range msgs {
		m := &fsmv1.EnqueueMessage{}
		if tmpl != nil {
			m = cloneMsg(tmpl)
		}
		msgs[i] = m
	}
	return e.enqueue(queue, msgs...)
}

func cloneMsg(m *fsmv1.EnqueueMessage) *fsmv1.EnqueueMessage {
	return &fsmv1.EnqueueMessage{Payload: m.Payload, Priority: m.Priority, FairnessKey: m.FairnessKey, Weight: m.Weight, ThrottleKeys: m.ThrottleKeys, DelayMs: m.DelayMs, TtlMs: m.TtlMs, ConcurrencyKey: m.ConcurrencyKey}
}

func ref(t testing.TB, d *state.Delivery) *fsmv1.Ref {
	t.Helper()
	if d.ID == 0 || d.LeaseToken == 0 {
		t.Fatalf("delivery without id or lease token: %+v", d)
	}
	return &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken}
}

func (e *env) ack(ds ...*state.Delivery) {
	e.t.Helper()
	refs := make([]*fsmv1.Ref, len(ds))
	for i, d := range ds {
		refs[i] = ref(e.t, d)
	}
	res, err := fsm.As[*fsm.ItemsResult](e.apply(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}}), nil)
	if err != nil {
		e.t.Fatalf("ack: %v", err)
	}
	for i, err := range res.Items {
		if err != nil {
			e.t.Fatalf("ack %d: %v", ds[i].ID, err)
		}
	}
}

func (e *env) register(queue string, maxInFlight int) *Consumer {
	e.t.Helper()
	c, err := e.s.Register(context.Background(), ConsumerRequest{Queue: queue, Name: "test", MaxInFlight: maxInFlight})
	if err != nil {
		e.t.Fatalf("register: %v", err)
	}
	return c
}

// recv takes the next delivery of c, which must come without time
// passing: once the scheduler is idle, it is buffered or it is a failure.
func (e *env) recv(c *Consumer) *state.Delivery {
	e.t.Helper()
	if d, ok := c.TakeOne(); ok {
		return d
	}
	e.idle()
	if d, ok := c.TakeOne(); ok {
		return d
	}
	select {
	case <-c.Done():
		e.t.Fatalf("consumer ended: %v", c.Err())
	default:
		e.t.Fatalf("no delivery to %s once the scheduler is idle", c.ID())
	}
	return nil
}

func (e *env) recvN(c *Consumer, n int) []*state.Delivery {
	e.t.Helper()
	out := make([]*state.Delivery, n)
	for i := range out {
		out[i] = e.recv(c)
	}
	return out
}

// drain takes what is buffered once the scheduler is quiet.
func (e *env) drain(c *Consumer) []*state.Delivery {
	e.t.Helper()
	e.idle()
	var out []*state.Delivery
	c.Take(func(d *state.Delivery) bool {
		out = append(out, d)
		return true
	})
	return out
}

func (e *env) expectNone(c *Consumer) {
	e.t.Helper()
	if got := e.drain(c); len(got) > 0 {
		e.t.Fatalf("%s got %d unexpected deliveries (first %d)", c.ID(), len(got), got[0].ID)
	}
}

func (e *env) info(queue string) *state.QueueInfo {
	e.t.Helper()
	qi, err := e.f.Reader().GetQueue(queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return qi
}

func (e *env) leasesHeld(consumerID string) (n int) {
	e.f.Reader().Read(func(v fsm.View) { n = v.LeasesHeld(consumerID) })
	return n
}

// pendingState reports the scheduler's pending grants for a consumer and a queue.
func (e *env) pendingState(c *Consumer) (consumer, queue int) {
	pl := e.term.pipe
	pl.mu.Lock()
	queue = len(pl.pending[c.queue])
	pl.mu.Unlock()
	e.term.reg.mu.Lock()
	defer e.term.reg.mu.Unlock()
	return c.pending, queue
}

var errInjected = errors.New("injected proposal failure")

// errLeadershipLost stands for raft.ErrLeadershipLost as cluster wraps it.
var errLeadershipLost = errors.New("injected: leadership lost, outcome unknown")
