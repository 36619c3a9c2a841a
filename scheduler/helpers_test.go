package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// waitTimeout bounds every wait for a condition.
const waitTimeout = 10 * time.Second

// fakeProposer applies commands straight to the FSM with an incrementing
// index. hook, if set, runs before the apply and may block or fail it.
type fakeProposer struct {
	f     *fsm.FSM
	mu    sync.Mutex
	index uint64
	hook  atomic.Pointer[func(ctx context.Context, cmd *fsmv1.Command) error]
	count sync.Map // op type name -> *atomic.Int64
}

func (p *fakeProposer) setHook(h func(ctx context.Context, cmd *fsmv1.Command) error) {
	if h == nil {
		p.hook.Store(nil)
		return
	}
	p.hook.Store(&h)
}

func opName(cmd *fsmv1.Command) string {
	switch cmd.Op.(type) {
	case *fsmv1.Command_LeaseGrant:
		return "grant"
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

func (p *fakeProposer) proposed(op string) int64 {
	v, ok := p.count.Load(op)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (p *fakeProposer) Propose(ctx context.Context, cmd *fsmv1.Command) (*fsm.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h := p.hook.Load(); h != nil {
		if err := (*h)(ctx, cmd); err != nil {
			return nil, err
		}
	}
	v, _ := p.count.LoadOrStore(opName(cmd), new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.index++
	return p.f.ApplyCommand(p.index, cmd), nil
}

type env struct {
	t      testing.TB
	f      *fsm.FSM
	p      *fakeProposer
	clock  *FakeClock
	s      *Scheduler
	cancel context.CancelFunc
	done   chan struct{}
}

type envOpt func(*Config)

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	f := fsm.New(fsm.Options{Logger: discard})
	clock := NewFakeClock(time.UnixMilli(1_700_000_000_000))
	p := &fakeProposer{f: f}
	cfg := Config{Logger: discard, Clock: clock, NodeID: "n1", LeaseGrace: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	s := New(cfg, f, p)
	f.SetNotifier(s)
	e := &env{t: t, f: f, p: p, clock: clock, s: s}
	e.start()
	t.Cleanup(func() {
		e.stop()
		if err := f.Verify(); err != nil {
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
	e.waitFor("leading", func() bool {
		e.s.mu.Lock()
		defer e.s.mu.Unlock()
		return e.s.running
	})
}

// stop cancels RunLeader and waits for it to return.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case <-e.done:
		e.s.mu.Lock()
		active, inflight := e.s.active, e.s.inflight
		e.s.mu.Unlock()
		if active != 0 || inflight != 0 {
			e.t.Errorf("RunLeader returned with %d goroutines and %d grants outstanding", active, inflight)
		}
	case <-time.After(waitTimeout):
		e.t.Errorf("RunLeader did not return after cancel")
	}
	e.cancel = nil
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// idle waits until the scheduler has nothing left to do at the current
// fake time.
func (e *env) idle() {
	e.t.Helper()
	e.waitFor("scheduler quiescent", e.s.quiescent)
}

func (e *env) apply(cmd *fsmv1.Command) *fsm.Result {
	e.t.Helper()
	cmd.NowMs = e.clock.Now().UnixMilli()
	res, err := e.p.Propose(context.Background(), cmd)
	if err != nil {
		e.t.Fatalf("propose %T: %v", cmd.Op, err)
	}
	if res.Err != nil {
		e.t.Fatalf("apply %T: %v", cmd.Op, res.Err)
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

func (e *env) enqueue(queue string, msgs ...*fsmv1.EnqueueMessage) []string {
	e.t.Helper()
	res := e.apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: queue, Messages: msgs}}}}})
	if res.BatchErrs[0] != nil {
		e.t.Fatalf("enqueue: %v", res.BatchErrs[0])
	}
	return res.IDs[0]
}

func (e *env) enqueueN(queue string, n int, tmpl *fsmv1.EnqueueMessage) []string {
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
	return &fsmv1.EnqueueMessage{Payload: m.Payload, Priority: m.Priority, FairnessKey: m.FairnessKey, Weight: m.Weight, ThrottleKeys: m.ThrottleKeys, DelayMs: m.DelayMs, TtlMs: m.TtlMs}
}

func ref(t testing.TB, d *raftqv1.Delivery) *fsmv1.Ref {
	t.Helper()
	id, err := fsm.ParseID(d.Id)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := fsm.ParseID(d.LeaseToken)
	if err != nil {
		t.Fatal(err)
	}
	return &fsmv1.Ref{Queue: d.Queue, MessageId: id, LeaseToken: tok}
}

func (e *env) ack(ds ...*raftqv1.Delivery) {
	e.t.Helper()
	refs := make([]*fsmv1.Ref, len(ds))
	for i, d := range ds {
		refs[i] = ref(e.t, d)
	}
	res := e.apply(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}})
	for i, err := range res.Items {
		if err != nil {
			e.t.Fatalf("ack %s: %v", ds[i].Id, err)
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

func (e *env) recv(c *Consumer) *raftqv1.Delivery {
	e.t.Helper()
	select {
	case d := <-c.Deliveries():
		return d
	case <-c.Done():
		e.t.Fatalf("consumer ended: %v", c.Err())
	case <-time.After(waitTimeout):
		e.t.Fatalf("timed out waiting for a delivery to %s", c.ID())
	}
	return nil
}

func (e *env) recvN(c *Consumer, n int) []*raftqv1.Delivery {
	e.t.Helper()
	out := make([]*raftqv1.Delivery, n)
	for i := range out {
		out[i] = e.recv(c)
	}
	return out
}

// drain takes what is buffered once the scheduler is quiet.
func (e *env) drain(c *Consumer) []*raftqv1.Delivery {
	e.t.Helper()
	e.idle()
	var out []*raftqv1.Delivery
	for {
		select {
		case d := <-c.Deliveries():
			out = append(out, d)
		default:
			return out
		}
	}
}

func (e *env) expectNone(c *Consumer) {
	e.t.Helper()
	if got := e.drain(c); len(got) > 0 {
		e.t.Fatalf("%s got %d unexpected deliveries (first %s)", c.ID(), len(got), got[0].Id)
	}
}

func (e *env) info(queue string) *raftqv1.QueueInfo {
	e.t.Helper()
	qi, err := e.f.GetQueue(queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return qi
}

func (e *env) leasesHeld(consumerID string) (n int) {
	e.f.Read(func(v fsm.View) { n = v.LeasesHeld(consumerID) })
	return n
}

// pendingState reports the scheduler's pending grants for a consumer and a queue.
func (e *env) pendingState(c *Consumer) (consumer, queue int) {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	if qs := e.s.queues[c.queue]; qs != nil {
		queue = len(qs.pending)
	}
	return c.pending, queue
}

var errInjected = errors.New("injected proposal failure")
