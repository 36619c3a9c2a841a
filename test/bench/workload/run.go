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

// Phase names, in the order Run performs them for each client kind (the
// batch client runs enqueue, drain and lifecycle only).
const (
	PhaseEnqueue     = "enqueue"
	PhaseEnqueueHalf = "enqueue-half"
	PhaseEnqueueSync = "enqueue-sync"
	PhaseDrain       = "drain"
	PhaseLifecycle   = "lifecycle"
	PhasePaced       = "paced"
)

// Queue names of one client kind: its enqueue phases fill the backlog
// queue that its drain empties; lifecycle and paced have their own.
func BacklogQueue(kind string) string   { return "bench-" + kind + "-backlog" }
func LifecycleQueue(kind string) string { return "bench-" + kind + "-life" }
func PacedQueue(kind string) string     { return "bench-" + kind + "-paced" }

// ProcCPU is the CPU time a server process used during a phase.
type ProcCPU struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"cpu_seconds"`
	// Cores is Seconds over the phase's wall time (1.0 = one core busy).
	Cores float64 `json:"cores"`
}

// PhaseResult is what one phase measured.
type PhaseResult struct {
	// Client is the client kind (ClientUnary, ...); Name the phase.
	Client string `json:"client"`
	Name   string `json:"name"`
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
	// EndToEnd is from the enqueue call to the delivery (lifecycle, paced).
	EndToEnd *LatencySummary `json:"end_to_end_latency,omitempty"`
	// Deliveries over DeliverySeconds (drain, lifecycle).
	Deliveries      int64     `json:"deliveries,omitempty"`
	DeliverySeconds float64   `json:"delivery_seconds,omitempty"`
	DeliveryRate    float64   `json:"deliveries_per_sec,omitempty"`
	ServerCPU       []ProcCPU `json:"server_cpu"`
	// Entries is how far the broker's replicated log advanced over the
	// phase (raftq: the leader's applied index), and EntriesPerMessage
	// that over Deliveries (over Messages where nothing was delivered).
	Entries           uint64  `json:"log_entries,omitempty"`
	EntriesPerMessage float64 `json:"log_entries_per_message,omitempty"`
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
	// SameClient maps a client kind that was not run to the kind whose
	// phases stand for it: the peers' ordinary client (ClientSDK) is
	// their unary client.
	SameClient map[string]string `json:"same_client,omitempty"`
}

// Phase returns the result of the named phase of client kind (following
// SameClient), or nil.
func (s *SystemResult) Phase(kind, name string) *PhaseResult {
	if same, ok := s.SameClient[kind]; ok {
		kind = same
	}
	for i := range s.Phases {
		if s.Phases[i].Client == kind && s.Phases[i].Name == name {
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
	OnPhase func(ctx context.Context, t Target, client, phase string) func()
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
	for ki, kind := range rn.Cfg.Clients {
		d, same := rn.t.ClientDriver(kind)
		if same != "" {
			if res.SameClient == nil {
				res.SameClient = map[string]string{}
			}
			res.SameClient[kind] = same
			rn.Log.Info("client kind is another's; not run again", "system", rn.t.Name, "client", kind, "same_as", same)
			continue
		}
		if err := rn.client(ctx, res, kind, ki, d); err != nil {
			return err
		}
	}
	chk := rn.ledger.Check()
	chk.LeftInQueue = rn.leftInQueue(ctx)
	res.Check = &chk
	rn.Log.Info("exactly-once check", "system", rn.t.Name, "result", chk.String())
	return nil
}

// client runs the phases of one client kind (the ki-th of the run) with d.
func (rn *run) client(ctx context.Context, res *SystemResult, kind string, ki int, d Driver) error {
	c := rn.Cfg
	for _, q := range []string{BacklogQueue(kind), LifecycleQueue(kind), PacedQueue(kind)} {
		if err := d.CreateQueue(ctx, QueueSpec{Name: q, Consumers: c.Consumers, MaxInFlight: c.MaxInFlight}); err != nil {
			return fmt.Errorf("%s client: create queue %s: %w", kind, q, err)
		}
	}
	// Message keys carry the phase index: 16 per client kind keep the
	// phases of different kinds apart.
	key := func(i int) int { return ki*16 + i }
	window, batch := c.Window, 1
	steps := []struct {
		name   string
		limit  Limit
		window int
		idx    int
	}{
		{PhaseEnqueue, c.Enqueue, c.Window, 1},
		{PhaseEnqueueHalf, c.EnqueueHalf, c.Window, 5},
		{PhaseEnqueueSync, c.EnqueueSync, 1, 2},
	}
	paced := c.Paced
	if kind == ClientBatch {
		window, batch = c.BatchWindow, c.BatchSize
		steps = steps[:1]
		steps[0].limit, steps[0].window = c.EnqueueBatch, c.BatchWindow
		paced = Limit{}
	}
	add := func(p PhaseResult) error {
		res.Phases = append(res.Phases, p)
		return ctx.Err()
	}
	for _, s := range steps {
		if s.limit.Off() {
			continue
		}
		rate := 0.0
		if s.name == PhaseEnqueueHalf {
			// Half of the peak just measured: the latency a system
			// offers when it is busy but not saturated.
			peak := res.Phase(kind, PhaseEnqueue)
			if peak == nil || peak.Rate <= 0 {
				continue
			}
			rate = peak.Rate / 2
		}
		err := add(rn.phase(ctx, kind, s.name, func(ctx context.Context, pr *PhaseResult) error {
			return rn.enqueue(ctx, d, pr, BacklogQueue(kind), key(s.idx), s.window, batch, s.limit, rate)
		}))
		if err != nil {
			return err
		}
	}
	if c.Drain {
		var sent []int
		for _, s := range steps {
			sent = append(sent, key(s.idx))
		}
		err := add(rn.phase(ctx, kind, PhaseDrain, func(ctx context.Context, pr *PhaseResult) error {
			return rn.drain(ctx, d, pr, BacklogQueue(kind), sent)
		}))
		if err != nil {
			return err
		}
	}
	if !c.Lifecycle.Off() {
		err := add(rn.phase(ctx, kind, PhaseLifecycle, func(ctx context.Context, pr *PhaseResult) error {
			return rn.lifecycle(ctx, d, pr, LifecycleQueue(kind), key(4), window, batch, c.Lifecycle, c.LifecycleRate)
		}))
		if err != nil {
			return err
		}
	}
	if !paced.Off() {
		// A handful of producer goroutines is enough at this rate.
		err := add(rn.phase(ctx, kind, PhasePaced, func(ctx context.Context, pr *PhaseResult) error {
			return rn.lifecycle(ctx, d, pr, PacedQueue(kind), key(6), min(c.Window, 16), 1, paced, c.PacedRate)
		}))
		if err != nil {
			return err
		}
	}
	return nil
}

// leftInQueue sums both queues' depth once it stops falling: acks of some
// brokers are asynchronous and may still be landing.
func (rn *run) leftInQueue(ctx context.Context) int64 {
	var last, total int64 = -1, 0
	_ = harness.WaitFor(ctx, 10*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		total = 0
		for _, kind := range rn.Cfg.Clients {
			d, same := rn.t.ClientDriver(kind)
			if same != "" {
				continue
			}
			for _, q := range []string{BacklogQueue(kind), LifecycleQueue(kind), PacedQueue(kind)} {
				n, err := d.Depth(ctx, q)
				if err != nil {
					rn.Log.Warn("reading queue depth", "system", rn.t.Name, "queue", q, "err", err)
					total = -1
					return nil // give up: the depth is unknown
				}
				total += n
			}
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
func (rn *run) phase(ctx context.Context, kind, name string, body func(context.Context, *PhaseResult) error) PhaseResult {
	pr := PhaseResult{Client: kind, Name: name}
	rn.Log.Info("phase starting", "system", rn.t.Name, "client", kind, "phase", name)
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
	var idx0 uint64
	haveIdx := false
	if rn.t.LogIndex != nil {
		i, err := rn.t.LogIndex(ctx)
		idx0, haveIdx = i, err == nil
	}
	start := time.Now()
	var stop func()
	if rn.OnPhase != nil {
		stop = rn.OnPhase(ctx, rn.t, kind, name)
	}
	err := body(ctx, &pr)
	if stop != nil {
		stop()
	}
	wall := time.Since(start).Seconds()
	if haveIdx {
		if i, err := rn.t.LogIndex(ctx); err == nil && i >= idx0 {
			pr.Entries = i - idx0
			n := pr.Deliveries
			if n == 0 {
				n = pr.Messages
			}
			if n > 0 {
				pr.EntriesPerMessage = float64(pr.Entries) / float64(n)
			}
		}
	}
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
		rn.Log.Warn("phase failed", "system", rn.t.Name, "client", kind, "phase", name, "err", err)
	}
	rn.Log.Info("phase done", "system", rn.t.Name, "client", kind, "phase", name, "messages", pr.Messages, "rate", int64(pr.Rate), "errors", pr.Errors)
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
func (rn *run) enqueue(ctx context.Context, d Driver, pr *PhaseResult, queue string, phaseIdx, window, batch int, limit Limit, rate float64) error {
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
		p, err := d.NewProducer(ctx, queue)
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
func (rn *run) startConsumers(ctx context.Context, d Driver, queue string, handle func(at, now time.Time)) (*consumers, error) {
	cs := &consumers{started: time.Now()}
	for i := range rn.Cfg.Consumers {
		c, err := d.StartConsumer(ctx, queue, rn.Cfg.MaxInFlight, func(p []byte) {
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
func (rn *run) drain(ctx context.Context, d Driver, pr *PhaseResult, queue string, phases []int) error {
	backlog := rn.ledger.PendingIn(phases...)
	cs, err := rn.startConsumers(ctx, d, queue, nil)
	if err != nil {
		return err
	}
	werr := rn.ledger.WaitDelivered(ctx, rn.Cfg.IdleTimeout, phases...)
	cs.stop(ctx, rn.Log)
	cs.record(pr)
	pr.Messages, pr.Seconds, pr.Rate = pr.Deliveries, pr.DeliverySeconds, pr.DeliveryRate
	rn.Log.Info("drained", "system", rn.t.Name, "backlog", backlog, "deliveries", pr.Deliveries)
	return werr
}

// lifecycle runs producers (window calls of batch messages outstanding
// each, paced to rate if positive) and consumers together on a fresh queue
// and measures the time from enqueue to delivery.
func (rn *run) lifecycle(ctx context.Context, d Driver, pr *PhaseResult, queue string, phaseIdx, window, batch int, limit Limit, rate float64) error {
	var e2e Latencies
	cs, err := rn.startConsumers(ctx, d, queue, func(at, now time.Time) {
		e2e.Add(now.Sub(at))
	})
	if err != nil {
		return err
	}
	perr := rn.enqueue(ctx, d, pr, queue, phaseIdx, window, batch, limit, rate)
	werr := rn.ledger.WaitDelivered(ctx, rn.Cfg.IdleTimeout, phaseIdx)
	cs.stop(ctx, rn.Log)
	cs.record(pr)
	s := e2e.Summary()
	pr.EndToEnd = &s
	return errors.Join(perr, werr)
}
