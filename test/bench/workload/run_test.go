package workload

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memBroker is an in-process stand-in for a broker: a buffered channel per
// queue. It can lose one message and deliver another twice, so that the
// runner's exactly-once check is seen to catch both.
type memBroker struct {
	mu     sync.Mutex
	queues map[string]chan []byte
	// loseOne drops the first message enqueued to the backlog (after
	// acknowledging it); dupOne delivers the first backlog delivery twice.
	loseOne, dupOne bool
	lost, duped     atomic.Bool
}

func newMemBroker() *memBroker { return &memBroker{queues: map[string]chan []byte{}} }

func (b *memBroker) q(name string) chan []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queues[name]
}

func (b *memBroker) CreateQueue(_ context.Context, q QueueSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queues[q.Name] = make(chan []byte, 1<<16)
	return nil
}

type memProducer struct {
	b     *memBroker
	queue string
}

func (b *memBroker) NewProducer(_ context.Context, queue string) (Producer, error) {
	return &memProducer{b, queue}, nil
}

func (p *memProducer) Enqueue(ctx context.Context, payloads [][]byte) error {
	q := p.b.q(p.queue)
	for _, m := range payloads {
		if p.queue == BacklogQueue(ClientUnary) && p.b.loseOne && p.b.lost.CompareAndSwap(false, true) {
			continue
		}
		select {
		case q <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *memProducer) Close() error { return nil }

type memConsumer struct {
	stop chan struct{}
	done chan struct{}
}

func (b *memBroker) StartConsumer(_ context.Context, queue string, _ int, handle func([]byte)) (Consumer, error) {
	q := b.q(queue)
	c := &memConsumer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case m := <-q:
				handle(m)
				if queue == BacklogQueue(ClientUnary) && b.dupOne && b.duped.CompareAndSwap(false, true) {
					handle(m)
				}
			}
		}
	}()
	return c, nil
}

func (c *memConsumer) Stop(context.Context) error {
	close(c.stop)
	<-c.done
	return nil
}

func (b *memBroker) Depth(_ context.Context, queue string) (int64, error) {
	return int64(len(b.q(queue))), nil
}

func smallConfig() Config {
	c := DefaultConfig()
	c.Producers, c.Window = 2, 4
	c.BatchSize, c.BatchWindow = 10, 2
	c.Consumers, c.MaxInFlight = 2, 8
	c.PayloadSize = 64
	c.Enqueue = Limit{Messages: 500}
	c.EnqueueHalf = Limit{Messages: 100}
	c.EnqueueSync = Limit{Messages: 50}
	c.EnqueueBatch = Limit{Messages: 305} // not a multiple of the batch
	c.Lifecycle = Limit{Messages: 200}
	c.Paced, c.PacedRate = Limit{Messages: 40}, 2000
	c.IdleTimeout = 500 * time.Millisecond
	c.CallTimeout = 5 * time.Second
	return c
}

func TestRunnerRunsEveryPhaseExactlyOnce(t *testing.T) {
	b := newMemBroker()
	procs := []Proc{{Name: "self", Pid: os.Getpid()}}
	var hooked []string
	r := &Runner{Cfg: smallConfig(), Log: slog.New(slog.DiscardHandler),
		OnPhase: func(_ context.Context, _ Target, client, phase string) func() {
			hooked = append(hooked, client+" "+phase)
			return nil
		}}
	// One broker behind every client kind: each kind has queues of its own.
	target := Target{Name: "mem", Nodes: 1, Driver: b, Clients: map[string]Driver{ClientUnary: b, ClientBatch: b},
		Procs: func() []Proc { return procs }}
	res := r.Run(context.Background(), target)
	if res.Error != "" {
		t.Fatalf("run failed: %s", res.Error)
	}
	type phase struct {
		client, name string
		msgs, calls  int64
	}
	var want []phase
	for _, k := range []string{ClientUnary, ClientBatch, ClientSDK} {
		if k == ClientBatch {
			// 305 is not a multiple of the batch: the last call is short.
			want = append(want, phase{k, PhaseEnqueue, 305, 31}, phase{k, PhaseDrain, 305, 0}, phase{k, PhaseLifecycle, 200, 20})
			continue
		}
		want = append(want, phase{k, PhaseEnqueue, 500, 500}, phase{k, PhaseEnqueueHalf, 100, 100}, phase{k, PhaseEnqueueSync, 50, 50},
			phase{k, PhaseDrain, 650, 0}, phase{k, PhaseLifecycle, 200, 200}, phase{k, PhasePaced, 40, 40})
	}
	if len(res.Phases) != len(want) {
		t.Fatalf("%d phases, want %d", len(res.Phases), len(want))
	}
	for i, w := range want {
		p := res.Phases[i]
		if p.Client != w.client || p.Name != w.name || p.Messages != w.msgs || p.Calls != w.calls || p.Errors != 0 || p.Aborted {
			t.Errorf("phase %d = %s %s: %d msgs, %d calls, %d errors (aborted %v); want %s %s: %d msgs, %d calls",
				i, p.Client, p.Name, p.Messages, p.Calls, p.Errors, p.Aborted, w.client, w.name, w.msgs, w.calls)
		}
		if p.Rate <= 0 || p.Seconds <= 0 {
			t.Errorf("phase %s: rate %v over %vs", p.Name, p.Rate, p.Seconds)
		}
		if len(p.ServerCPU) != 1 || p.ServerCPU[0].Name != "self" {
			t.Errorf("phase %s: server cpu %+v", p.Name, p.ServerCPU)
		}
		if p.OtherCPU.Name != "other" || p.OtherCPU.Seconds < 0 {
			t.Errorf("phase %s: other cpu %+v", p.Name, p.OtherCPU)
		}
		if hooked[i] != w.client+" "+w.name {
			t.Errorf("OnPhase saw %v", hooked)
		}
	}
	if l := res.Phase(ClientUnary, PhaseEnqueue).Latency; l == nil || l.Count != 500 {
		t.Errorf("enqueue latency %+v, want 500 samples", l)
	}
	if l := res.Phase(ClientBatch, PhaseEnqueue).Latency; l == nil || l.Count != 31 {
		t.Errorf("batch enqueue latency %+v, want one sample per call (31)", l)
	}
	for _, k := range []string{ClientUnary, ClientSDK} {
		if e := res.Phase(k, PhaseLifecycle).EndToEnd; e == nil || e.Count != 200 {
			t.Errorf("%s lifecycle end-to-end %+v, want 200 samples", k, e)
		}
		if e := res.Phase(k, PhasePaced).EndToEnd; e == nil || e.Count != 40 {
			t.Errorf("%s paced end-to-end %+v, want 40 samples", k, e)
		}
		if d := res.Phase(k, PhaseDrain); d.Deliveries != 650 || d.DeliveryRate <= 0 {
			t.Errorf("%s drain deliveries %d at %v/s", k, d.Deliveries, d.DeliveryRate)
		}
	}
	// Paced: 40 messages at 2000/s take at least 19.5 ms (the first goes
	// at once).
	if p := res.Phase(ClientUnary, PhasePaced); p.Seconds < 0.0195 {
		t.Errorf("paced phase took %vs: not paced", p.Seconds)
	}
	if len(res.SameClient) != 0 {
		t.Errorf("every kind has its own driver, yet same client %v", res.SameClient)
	}
	const total = 2*(650+200+40) + 305 + 200
	if c := res.Check; c == nil || !c.OK() || c.Acked != total || c.Delivered != total {
		t.Fatalf("check %v, want %d acked and delivered", c, total)
	}
}

// A system whose ordinary client is its unary client (the peers) runs the
// unary and batch phases with it, and not the SDK phases again: they are
// looked up as the unary ones.
func TestRunnerPeerSDKIsItsUnaryClient(t *testing.T) {
	b := newMemBroker()
	cfg := smallConfig()
	cfg.EnqueueHalf, cfg.EnqueueSync, cfg.Lifecycle, cfg.Paced = Limit{}, Limit{}, Limit{}, Limit{}
	r := &Runner{Cfg: cfg, Log: slog.New(slog.DiscardHandler)}
	res := r.Run(context.Background(), Target{Name: "peer", Driver: b})
	if res.Error != "" {
		t.Fatalf("run failed: %s", res.Error)
	}
	var got []string
	for _, p := range res.Phases {
		got = append(got, p.Client+" "+p.Name)
	}
	want := []string{"unary enqueue", "unary drain", "batch enqueue", "batch drain"}
	if !slices.Equal(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	if res.SameClient[ClientSDK] != ClientUnary {
		t.Fatalf("same client %v, want sdk → unary", res.SameClient)
	}
	if p := res.Phase(ClientSDK, PhaseEnqueue); p == nil || p != res.Phase(ClientUnary, PhaseEnqueue) {
		t.Fatalf("sdk enqueue is %+v, want the unary enqueue phase", p)
	}
	if c := res.Check; c == nil || !c.OK() || c.Acked != 805 {
		t.Fatalf("check %v", c)
	}
}

func TestRunnerReportsLossAndDuplicates(t *testing.T) {
	b := newMemBroker()
	b.loseOne, b.dupOne = true, true
	cfg := smallConfig()
	cfg.EnqueueHalf, cfg.EnqueueSync, cfg.Lifecycle, cfg.Paced = Limit{}, Limit{}, Limit{}, Limit{}
	cfg.Clients = []string{ClientUnary}
	r := &Runner{Cfg: cfg, Log: slog.New(slog.DiscardHandler)}
	res := r.Run(context.Background(), Target{Name: "mem", Driver: b})
	c := res.Check
	if c == nil {
		t.Fatalf("no check: %s", res.Error)
	}
	if c.OK() || c.Missing != 1 || c.Duplicates != 1 || c.DuplicateKeys != 1 || c.Acked != 500 || c.Delivered != 499 {
		t.Fatalf("check %v, want 1 missing and 1 duplicate of 500", c)
	}
	if d := res.Phase(ClientUnary, PhaseDrain); d == nil || !d.Aborted || d.FirstError == "" {
		t.Fatalf("drain should report the message it never saw: %+v", d)
	}
}

// A message lost in one client kind's backlog fails that kind's drain
// only: the later phases and kinds wait for their own messages.
func TestRunnerLossStaysInItsPhase(t *testing.T) {
	b := newMemBroker()
	b.loseOne = true // the first message to the unary backlog
	cfg := smallConfig()
	cfg.EnqueueHalf, cfg.EnqueueSync = Limit{}, Limit{}
	r := &Runner{Cfg: cfg, Log: slog.New(slog.DiscardHandler)}
	res := r.Run(context.Background(), Target{Name: "mem", Driver: b, Clients: map[string]Driver{ClientUnary: b, ClientBatch: b}})
	if res.Error != "" {
		t.Fatalf("run failed: %s", res.Error)
	}
	for _, p := range res.Phases {
		failed := p.Client == ClientUnary && p.Name == PhaseDrain
		if p.Aborted != failed {
			t.Errorf("%s %s: aborted %v (%s), want %v", p.Client, p.Name, p.Aborted, p.FirstError, failed)
		}
		if failed && !strings.Contains(p.FirstError, "1 acknowledged messages not delivered") {
			t.Errorf("unary drain error %q", p.FirstError)
		}
	}
	if c := res.Check; c == nil || c.Missing != 1 || c.Duplicates != 0 {
		t.Fatalf("check %v, want the one lost message missing", c)
	}
}

// failingDriver refuses every enqueue.
type failingDriver struct{ *memBroker }

type failingProducer struct{}

func (failingDriver) NewProducer(context.Context, string) (Producer, error) {
	return failingProducer{}, nil
}
func (failingProducer) Enqueue(context.Context, [][]byte) error { return errRefused }
func (failingProducer) Close() error                            { return nil }

var errRefused = errorString("refused")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestRunnerAbortsAPhaseAfterMaxErrors(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxErrors = 20
	cfg.Enqueue = Limit{Duration: time.Minute}
	cfg.Clients = []string{ClientUnary}
	cfg.EnqueueSync, cfg.Lifecycle, cfg.Paced, cfg.Drain = Limit{}, Limit{}, Limit{}, false
	r := &Runner{Cfg: cfg, Log: slog.New(slog.DiscardHandler)}
	start := time.Now()
	res := r.Run(context.Background(), Target{Name: "bad", Driver: failingDriver{newMemBroker()}})
	p := res.Phase(ClientUnary, PhaseEnqueue)
	if p == nil || !p.Aborted || p.Errors < 20 || p.Messages != 0 || p.FirstError != "refused" {
		t.Fatalf("phase %+v", p)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("a failing phase ran to its time limit instead of aborting")
	}
}
