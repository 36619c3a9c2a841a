package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// Phase names, in the order Run performs them.
const (
	PhaseEnqueue      = "enqueue"
	PhaseEnqueueHalf  = "enqueue-half"
	PhaseEnqueueSync  = "enqueue-sync"
	PhaseEnqueueBatch = "enqueue-batch"
	PhaseDrain        = "drain"
	PhaseLifecycle    = "lifecycle"
)

// Queue names: the enqueue phases fill the backlog queue that drain
// empties; lifecycle has its own.
const (
	BacklogQueue   = "bench-backlog"
	LifecycleQueue = "bench-life"
)

// ProcCPU is the CPU time a server process used during a phase.
type ProcCPU struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"cpu_seconds"`
	// Cores is Seconds over the phase's wall time (1.0 = one core busy).
	Cores float64 `json:"cores"`
}

// PhaseResult is what one phase measured.
type PhaseResult struct {
	Name string `json:"name"`
	// Messages acknowledged to producers (enqueue phases, lifecycle) or
	// delivered to consumers (drain), over Seconds of wall time.
	Messages int64   `json:"messages"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"msgs_per_sec"`
	Calls    int64   `json:"calls,omitempty"`
	Errors   int64   `json:"errors"`
	// FirstError is the first failed call's error.
	FirstError string `json:"first_error,omitempty"`
	Aborted    bool   `json:"aborted,omitempty"`
	// Latency is per enqueue call, from the call to its acknowledgement.
	Latency *LatencySummary `json:"enqueue_latency,omitempty"`
	// EndToEnd is from the enqueue call to the delivery (lifecycle).
	EndToEnd *LatencySummary `json:"end_to_end_latency,omitempty"`
	// Deliveries over DeliverySeconds (drain, lifecycle).
	Deliveries      int64     `json:"deliveries,omitempty"`
	DeliverySeconds float64   `json:"delivery_seconds,omitempty"`
	DeliveryRate    float64   `json:"deliveries_per_sec,omitempty"`
	ServerCPU       []ProcCPU `json:"server_cpu"`
	// ClientCPU is the load generator's own CPU time: it shares the cores.
	ClientCPU ProcCPU `json:"client_cpu"`
	// OtherCPU is CPU time the rest of the machine used meanwhile (busy
	// time of all cores less the servers and the load generator): other
	// work disturbing the figures.
	OtherCPU ProcCPU `json:"other_cpu"`
}

// SystemResult is the whole run against one Target.
type SystemResult struct {
	System string        `json:"system"`
	Nodes  int           `json:"nodes"`
	Error  string        `json:"error,omitempty"`
	Notes  []string      `json:"notes,omitempty"`
	Phases []PhaseResult `json:"phases,omitempty"`
	Check  *Check        `json:"check,omitempty"`
}

// Phase returns the named phase's result, or nil.
func (s *SystemResult) Phase(name string) *PhaseResult {
	for i := range s.Phases {
		if s.Phases[i].Name == name {
			return &s.Phases[i]
		}
	}
	return nil
}

// Runner runs the workload of Cfg against targets.
type Runner struct {
	Cfg Config
	Log *slog.Logger
	// OnPhase, if set, is called as each phase starts; the function it
	// returns, when the phase ends (a profiler hook).
	OnPhase func(ctx context.Context, t Target, phase string) func()
}

// run is the state of one Run.
type run struct {
	*Runner
	t        Target
	ledger   *Ledger
	payloads *Payloads
}

// Run performs every enabled phase against t and checks exactly-once
// delivery at the end. Failures are reported in the result, not returned:
// one broker that cannot run does not stop the others.
func (r *Runner) Run(ctx context.Context, t Target) SystemResult {
	res := SystemResult{System: t.Name, Nodes: t.Nodes, Notes: t.Notes}
	if err := r.Cfg.Validate(); err != nil {
		res.Error = err.Error()
		return res
	}
	rn := &run{Runner: r, t: t, ledger: NewLedger(), payloads: NewPayloads(r.Cfg.PayloadSize)}
	if err := rn.do(ctx, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

func (rn *run) do(ctx context.Context, res *SystemResult) error {
	c := rn.Cfg
	for _, q := range []string{BacklogQueue, LifecycleQueue} {
		if err := rn.t.Driver.CreateQueue(ctx, QueueSpec{Name: q, Consumers: c.Consumers, MaxInFlight: c.MaxInFlight}); err != nil {
			return fmt.Errorf("create queue %s: %w", q, err)
		}
	}
	type step struct {
		name   string
		limit  Limit
		window int
		batch  int
	}
	// Phase indexes (1-5) keep message keys of different phases apart.
	for _, s := range []struct {
		step
		idx int
	}{
		{step{PhaseEnqueue, c.Enqueue, c.Window, 1}, 1},
		{step{PhaseEnqueueHalf, c.EnqueueHalf, c.Window, 1}, 5},
		{step{PhaseEnqueueSync, c.EnqueueSync, 1, 1}, 2},
		{step{PhaseEnqueueBatch, c.EnqueueBatch, c.BatchWindow, c.BatchSize}, 3},
	} {
		if s.limit.Off() {
			continue
		}
		rate := 0.0
		if s.name == PhaseEnqueueHalf {
			// Half of the peak just measured: the latency a system
			// offers when it is busy but not saturated.
			peak := res.Phase(PhaseEnqueue)
			if peak == nil || peak.Rate <= 0 {
				continue
			}
			rate = peak.Rate / 2
		}
		p := rn.phase(ctx, s.name, func(ctx context.Context, pr *PhaseResult) error {
			return rn.enqueue(ctx, pr, BacklogQueue, s.idx, s.window, s.batch, s.limit, rate)
		})
		res.Phases = append(res.Phases, p)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if c.Drain {
		res.Phases = append(res.Phases, rn.phase(ctx, PhaseDrain, func(ctx context.Context, pr *PhaseResult) error {
			return rn.drain(ctx, pr)
		}))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if !c.Lifecycle.Off() {
		res.Phases = append(res.Phases, rn.phase(ctx, PhaseLifecycle, func(ctx context.Context, pr *PhaseResult) error {
			return rn.lifecycle(ctx, pr)
		}))
	}
	chk := rn.ledger.Check()
	chk.LeftInQueue = rn.leftInQueue(ctx)
	res.Check = &chk
	rn.Log.Info("exactly-once check", "system", rn.t.Name, "result", chk.String())
	return nil
}

// leftInQueue sums both queues' depth once it stops falling: acks of some
// brokers are asynchronous and may still be landing.
func (rn *run) leftInQueue(ctx context.Context) int64 {
	var last, total int64 = -1, 0
	_ = harness.WaitFor(ctx, 10*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		total = 0
		for _, q := range []string{BacklogQueue, LifecycleQueue} {
			n, err := rn.t.Driver.Depth(ctx, q)
			if err != nil {
				rn.Log.Warn("reading queue depth", "system", rn.t.Name, "queue", q, "err", err)
				total = -1
				return nil // give up: the depth is unknown
			}
			total += n
		}
		if total == 0 || (last >= 0 && total >= last) {
			return nil
		}
		last = total
		return errors.New("queue depth still falling")
	})
	return total
}

// phase runs body with CPU accounting and the OnPhase hook around it.
func (rn *run) phase(ctx context.Context, name string, body func(context.Context, *PhaseResult) error) PhaseResult {
	pr := PhaseResult{Name: name}
	rn.Log.Info("phase starting", "system", rn.t.Name, "phase", name)
	var procs []Proc
	if rn.t.Procs != nil {
		procs = rn.t.Procs()
	}
	before := make([]time.Duration, len(procs))
	for i, p := range procs {
		before[i], _ = CPU(p.Pid)
	}
	selfBefore := SelfCPU()
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.Pid
	}
	otherCPU := StartOtherCPU(pids...)
	start := time.Now()
	var stop func()
	if rn.OnPhase != nil {
		stop = rn.OnPhase(ctx, rn.t, name)
	}
	err := body(ctx, &pr)
	if stop != nil {
		stop()
	}
	wall := time.Since(start).Seconds()
	for i, p := range procs {
		after, cerr := CPU(p.Pid)
		if cerr != nil {
			rn.Log.Warn("reading cpu", "proc", p.Name, "err", cerr)
			continue
		}
		s := (after - before[i]).Seconds()
		pr.ServerCPU = append(pr.ServerCPU, ProcCPU{Name: p.Name, Seconds: s, Cores: s / wall})
	}
	cs := (SelfCPU() - selfBefore).Seconds()
	pr.ClientCPU = ProcCPU{Name: "bench", Seconds: cs, Cores: cs / wall}
	if other, err := otherCPU(); err == nil {
		pr.OtherCPU = ProcCPU{Name: "other", Seconds: other.Seconds(), Cores: other.Seconds() / wall}
	}
	if err != nil {
		pr.Aborted = true
		if pr.FirstError == "" {
			pr.FirstError = err.Error()
		}
		rn.Log.Warn("phase failed", "system", rn.t.Name, "phase", name, "err", err)
	}
	rn.Log.Info("phase done", "system", rn.t.Name, "phase", name, "messages", pr.Messages, "rate", int64(pr.Rate), "errors", pr.Errors)
	return pr
}

// errorLog counts failed calls, keeps the first, and aborts the phase when
// there are too many.
type errorLog struct {
	n     atomic.Int64
	once  sync.Once
	first string
	max   int64
	abort context.CancelCauseFunc
}

func (e *errorLog) add(err error) {
	e.once.Do(func() { e.first = err.Error() })
	if n := e.n.Add(1); n == e.max {
		e.abort(fmt.Errorf("%d failed calls (first: %s)", n, e.first))
	}
}

// enqueue runs producers with window calls of batch messages outstanding
// each, until limit, and records rate and latency into pr. A positive rate
// paces all producers together to rate messages per second.
func (rn *run) enqueue(ctx context.Context, pr *PhaseResult, queue string, phaseIdx, window, batch int, limit Limit, rate float64) error {
	c := rn.Cfg
	prods := make([]Producer, c.Producers)
	defer func() {
		for _, p := range prods {
			if p != nil {
				_ = p.Close()
			}
		}
	}()
	for i := range prods {
		p, err := rn.t.Driver.NewProducer(ctx, queue)
		if err != nil {
			return fmt.Errorf("producer %d: %w", i, err)
		}
		prods[i] = p
	}
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	errs := &errorLog{max: c.MaxErrors, abort: abort}
	var (
		lat      Latencies
		acked    atomic.Int64
		calls    atomic.Int64
		reserved atomic.Int64
		paced    atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(limit.Duration)
	for pi, prod := range prods {
		var seq atomic.Uint64
		for range window {
			wg.Go(func() {
				var local []time.Duration
				defer func() { lat.Add(local...) }()
				for ctx.Err() == nil {
					if limit.Duration > 0 && !time.Now().Before(deadline) {
						return
					}
					n := batch
					if limit.Messages > 0 {
						over := reserved.Add(int64(batch)) - limit.Messages
						if over >= int64(batch) {
							return
						}
						n -= int(max(over, 0))
					}
					if rate > 0 {
						slot := paced.Add(int64(n)) - int64(n)
						at := start.Add(time.Duration(float64(slot) / rate * float64(time.Second)))
						if harness.Sleep(ctx, time.Until(at)) != nil {
							return
						}
					}
					first := seq.Add(uint64(n)) - uint64(n)
					keys := make([]Key, n)
					payloads := make([][]byte, n)
					now := time.Now()
					for j := range n {
						keys[j] = MakeKey(phaseIdx, pi, first+uint64(j))
						payloads[j] = rn.payloads.Make(keys[j], now)
					}
					cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
					err := prod.Enqueue(cctx, payloads)
					cancel()
					d := time.Since(now)
					calls.Add(1)
					if err != nil {
						if ctx.Err() == nil {
							errs.add(err)
						}
						continue
					}
					rn.ledger.Acked(keys...)
					acked.Add(int64(n))
					local = append(local, d)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	pr.Messages, pr.Calls, pr.Errors, pr.FirstError = acked.Load(), calls.Load(), errs.n.Load(), errs.first
	pr.Seconds = elapsed.Seconds()
	pr.Rate = float64(pr.Messages) / pr.Seconds
	s := lat.Summary()
	pr.Latency = &s
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return context.Cause(ctx)
}

// consumers are the workload's running consumers on one queue.
type consumers struct {
	started    time.Time
	last       atomic.Int64 // UnixNano of the latest delivery
	deliveries atomic.Int64
	list       []Consumer
}

// startConsumers starts the workload's consumers on queue; handle, if set,
// runs for every delivery with the enqueue time read from its payload and
// the time it arrived.
func (rn *run) startConsumers(ctx context.Context, queue string, handle func(at, now time.Time)) (*consumers, error) {
	cs := &consumers{started: time.Now()}
	for i := range rn.Cfg.Consumers {
		c, err := rn.t.Driver.StartConsumer(ctx, queue, rn.Cfg.MaxInFlight, func(p []byte) {
			now := time.Now()
			k, at, err := Parse(p)
			if err != nil {
				rn.Log.Warn("foreign message", "queue", queue, "len", len(p))
				return
			}
			rn.ledger.Delivered(k)
			if handle != nil {
				handle(at, now)
			}
			cs.deliveries.Add(1)
			cs.last.Store(now.UnixNano())
		})
		if err != nil {
			cs.stop(ctx, rn.Log)
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		cs.list = append(cs.list, c)
	}
	return cs, nil
}

// stop stops every consumer, letting them settle what they handled.
func (cs *consumers) stop(ctx context.Context, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range cs.list {
		wg.Go(func() {
			if err := c.Stop(ctx); err != nil {
				log.Warn("stopping consumer", "err", err)
			}
		})
	}
	wg.Wait()
}

// record fills the delivery figures of pr.
func (cs *consumers) record(pr *PhaseResult) {
	pr.Deliveries = cs.deliveries.Load()
	if last := cs.last.Load(); last > 0 {
		pr.DeliverySeconds = time.Unix(0, last).Sub(cs.started).Seconds()
		pr.DeliveryRate = float64(pr.Deliveries) / pr.DeliverySeconds
	}
}

// drain consumes the backlog the enqueue phases left until every
// acknowledged message was delivered.
func (rn *run) drain(ctx context.Context, pr *PhaseResult) error {
	backlog := rn.ledger.Pending()
	cs, err := rn.startConsumers(ctx, BacklogQueue, nil)
	if err != nil {
		return err
	}
	werr := rn.ledger.WaitDelivered(ctx, rn.Cfg.IdleTimeout)
	cs.stop(ctx, rn.Log)
	cs.record(pr)
	pr.Messages, pr.Seconds, pr.Rate = pr.Deliveries, pr.DeliverySeconds, pr.DeliveryRate
	rn.Log.Info("drained", "system", rn.t.Name, "backlog", backlog, "deliveries", pr.Deliveries)
	return werr
}

// lifecycle runs producers and consumers together on a fresh queue and
// measures the time from enqueue to delivery.
func (rn *run) lifecycle(ctx context.Context, pr *PhaseResult) error {
	var e2e Latencies
	cs, err := rn.startConsumers(ctx, LifecycleQueue, func(at, now time.Time) {
		e2e.Add(now.Sub(at))
	})
	if err != nil {
		return err
	}
	perr := rn.enqueue(ctx, pr, LifecycleQueue, 4, rn.Cfg.Window, 1, rn.Cfg.Lifecycle, rn.Cfg.LifecycleRate)
	werr := rn.ledger.WaitDelivered(ctx, rn.Cfg.IdleTimeout)
	cs.stop(ctx, rn.Log)
	cs.record(pr)
	s := e2e.Summary()
	pr.EndToEnd = &s
	return errors.Join(perr, werr)
}
