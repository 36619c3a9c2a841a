//go:build linux

package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// campaign is one chaos run on one cluster.
type campaign struct {
	Nodes    int
	Seed     int64
	Kinds    []FaultKind
	Duration time.Duration // the fault phase (the plan's estimate)
	Short    bool          // briefer holds
	// Soak samples every node's resources once the workload without
	// faults is steady (at most WarmUp), half way through the faults and
	// at the end of the quiet phase, and every soakEvery in between, and
	// fails the run if one grew past its bound (soak.go).
	Soak   bool
	WarmUp time.Duration
}

const (
	visibility    = 3 * time.Second
	maxDeliveries = 4
	producers     = 4
	consumersPerQ = 2
	// quietPhase outlasts a fault's shadow in the attempt rules (two
	// visibility timeouts and faultAfterExtraMs) and their margins around
	// a gap (before it, and after it for the drops that stop the
	// workload) by 6 s: the stretch where attempts are held to deliveries.
	// soakMinWarmUp is the least warm-up of a soak before its baseline.
	soakMinWarmUp = time.Minute
	quietPhase    = 2*visibility + (faultAfterExtraMs+windowSlackMs+endSlackMs)*time.Millisecond + 6*time.Second
)

// runCampaign starts a cluster, runs the workload under the plan's faults,
// heals, drains, verifies and checks. It fails t on any violation, naming
// the seed and the file holding the history.
func runCampaign(t *testing.T, cc campaign) *Report {
	log := testLogger(t).With("nodes", cc.Nodes)
	t.Logf("chaos seed %d — replay with RAFTQ_CHAOS_SEED=%d", cc.Seed, cc.Seed)
	plan := Plan(cc.Seed, cc.Nodes, cc.Kinds, cc.Duration, cc.Short)
	for i, s := range plan {
		log.Info("planned fault", "n", i+1, "step", s.String())
	}
	// The whole campaign ends well before the test binary's own timeout
	// (which would kill it without cleanup).
	ctx, cancel := context.WithCancel(context.Background())
	// The fault phase may overrun its plan by half; it starts after a
	// soak's warm-up, so the bound is taken again then.
	faultsBy := func() time.Time {
		by := time.Now().Add(cc.Duration + cc.Duration/2)
		if d, ok := t.Deadline(); ok {
			by = minTime(by, d.Add(-4*time.Minute))
		}
		return by
	}
	stopFaultsBy := faultsBy()
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-30*time.Second))
	}
	defer cancel()

	queues := []QueueSpec{
		{Name: "work-a", DeadLetter: "work-a.dlq", MaxDeliveries: maxDeliveries},
		{Name: "work-b", DeadLetter: "work-b.dlq", MaxDeliveries: maxDeliveries},
		// The keyed queue (issue 23): concurrency keys with caps (a
		// default of 4, three overrides, two keys capped at 1), each
		// message's fairness key its concurrency key, so a paused key is
		// a paused concurrency key.
		{Name: "work-k", DeadLetter: "work-k.dlq", MaxDeliveries: maxDeliveries,
			Keys: []string{"k4", "kp", "k2", "o1", "o2"}, ConcurrencyLimit: 4,
			ConcurrencyLimits: map[string]int32{"kp": 3, "k2": 2, "o1": 1, "o2": 1}},
	}
	rec := NewRecorder(cc.Seed, cc.Nodes, queues)
	c := startCluster(t, log, cc.Nodes, rec.Crash)
	clientLog := slog.New(slog.DiscardHandler)
	if os.Getenv("RAFTQ_CHAOS_DEBUG") != "" {
		clientLog = log.With("component", "client")
	}
	cl, err := c.Dial(ctx, clientLog)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, q := range queues {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := cl.CreateQueue(cctx, q.Name, &raftqv1.QueueConfig{
			VisibilityTimeoutMs: visibility.Milliseconds(), MaxDeliveries: q.MaxDeliveries, DeadLetterQueue: q.DeadLetter,
			ConcurrencyLimit: q.ConcurrencyLimit, ConcurrencyLimits: q.ConcurrencyLimits})
		ccancel()
		if err != nil {
			t.Fatalf("create %s: %v", q.Name, err)
		}
	}

	w := NewWorkload(c, cl, rec, visibility, log)
	work, stopWork := context.WithCancel(ctx)
	var running sync.WaitGroup
	// On an early exit too: stop the workload and wait for it before the
	// client closes and the cluster goes.
	defer w.Wait()
	defer running.Wait()
	defer stopWork()
	rec.Update(func(h *History) { h.WorkloadStart = time.Now() })
	for i := range producers {
		rng := rand.New(rand.NewPCG(uint64(cc.Seed), uint64(i)))
		running.Go(func() { w.Produce(work, fmt.Sprintf("p%d", i), queues, rng) })
	}
	regs, err := NewRegisters(ctx, c, rec, []string{queues[0].Name, queues[1].Name})
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		rng := rand.New(rand.NewPCG(uint64(cc.Seed), uint64(100+i)))
		running.Go(func() { regs.Run(work, i, rng) })
	}
	for i, q := range queues {
		for j := range consumersPerQ {
			co := w.NewConsumer(fmt.Sprintf("c-%s-%d", q.Name, j), q.Name, false, uint64(cc.Seed)+uint64(10*i+j))
			if len(q.Keys) > 0 {
				// Credit to spare: the pause rules want the other keys
				// to flow, which a consumer holding its whole credit in
				// slow leases would stop.
				co.maxInFlight = 64
			}
			running.Go(func() { co.Run(work) })
		}
	}
	running.Go(func() { w.Pauses(work, queues[2], rand.New(rand.NewPCG(uint64(cc.Seed), 200))) })
	running.Go(func() { w.Lookups(work, queues, rand.New(rand.NewPCG(uint64(cc.Seed), 201))) })
	if err := harness.WaitFor(ctx, 30*time.Second, 100*time.Millisecond, func(context.Context) error {
		if n := w.Acked(); n < 20 {
			return fmt.Errorf("only %d enqueues acknowledged", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("workload does not get going: %v", err)
	}

	var sampler *Sampler
	var baseline string
	if cc.Soak {
		sampler = NewSampler(c)
		log.Info("soak: warming up without faults until steady", "at most", cc.WarmUp)
		baseline = sampler.WaitSteady(ctx, soakMinWarmUp, cc.WarmUp)
		log.Info("soak: baseline", "how", baseline)
		stopFaultsBy = faultsBy()
		sampler.Sample(ctx, soakPhaseStart)
		running.Go(func() { sampler.Run(work) })
		running.Go(func() {
			if harness.Sleep(work, cc.Duration/2) == nil {
				sampler.Sample(work, soakPhaseMiddle)
			}
		})
	}

	nm := NewNemesis(c, rec, log)
	nm.Run(ctx, plan, len(cc.Kinds), stopFaultsBy)
	if err := nm.Heal(ctx); err != nil {
		t.Errorf("final heal: %v", err)
	}
	healed := time.Now()
	leader, err := c.WaitHealthy(ctx, 60*time.Second)
	recov := Recovery{HealedAt: healed, LeaderAt: time.Now(), OK: err == nil}
	if err != nil {
		recov.Err = err.Error()
		// What every node was doing when it did not recover.
		dir := os.Getenv("RAFTQ_CHAOS_OUT")
		if dir == "" {
			dir, _ = os.MkdirTemp("", "raftq-chaos-stacks-")
		}
		if dir != "" && os.MkdirAll(dir, 0o755) == nil {
			notes := c.SaveGoroutines(context.WithoutCancel(ctx), dir)
			log.Warn("no recovery: goroutine stacks saved", "dir", dir, "notes", notes)
			for _, l := range c.DiagnoseStatus(context.WithoutCancel(ctx), dir) {
				log.Warn("no recovery: status", "call", l)
			}
		}
	} else {
		recov.Leader = leader.ID
	}
	rec.Update(func(h *History) { h.Recovery = recov })
	log.Info("healed", "leader", recov.Leader, "after", recov.LeaderAt.Sub(healed).Round(time.Millisecond), "err", recov.Err)

	// The workload runs on the healed cluster a little, without drops,
	// past the last fault's shadow: a stretch where every counted attempt
	// must be a delivery some consumer saw (attempt-without-delivery).
	w.Quiet()
	_ = harness.Sleep(ctx, quietPhase)
	if sampler != nil {
		sampler.Sample(ctx, soakPhaseEnd) // under the same load as the start
		if out := os.Getenv("RAFTQ_CHAOS_OUT"); out != "" {
			for _, note := range sampler.SaveHeapProfiles(ctx, out) {
				log.Warn("soak", "note", note)
			}
		}
	}
	stopWork()
	running.Wait()
	rec.Update(func(h *History) { h.WorkloadEnd = time.Now() })
	w.Wait()
	log.Info("workload stopped; draining", "acked_enqueue_calls", w.Acked())

	drain := w.Drain(ctx, queues, 2*time.Minute)
	drain.DataRaces = dataRaces(c)
	rec.Update(func(h *History) { h.Drain = drain })
	rec.Update(func(h *History) { h.Verify = verify(ctx, c) })
	rec.Update(func(h *History) { h.Repairs = repairs(ctx, c) })

	h := rec.Snapshot()
	r := Check(&h)
	if sampler != nil {
		r.Soak = JudgeSoak(sampler.Samples(), sampler.Series())
		r.Soak.Baseline = baseline
		for _, v := range r.Soak.Violations() {
			r.Violations = append(r.Violations, v)
			r.ViolationsByInvariant[v.Invariant]++
		}
	}
	t.Logf("\n%s", r.Table())
	writeOutputs(t, &h, r)
	return r
}

// verify waits (up to a minute) for every replica to report the same
// digest, and returns the last answer.
func verify(ctx context.Context, c *Cluster) VerifyResult {
	var last VerifyResult
	_ = harness.WaitFor(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		v, err := c.Verify(ctx)
		if err != nil {
			last = VerifyResult{Err: err.Error()}
			return err
		}
		last = VerifyResult{Consistent: v.GetConsistent()}
		for _, n := range v.GetNodes() {
			last.Nodes = append(last.Nodes, NodeDigest{ID: n.GetId(), AppliedIndex: n.GetAppliedIndex(),
				Digest: n.GetDigest(), CountersOK: n.GetCountersOk(), Err: n.GetError()})
		}
		h := History{Nodes: len(c.Nodes), Verify: last}
		if d := divergence(&h); d != "" {
			return fmt.Errorf("%s", d)
		}
		return nil
	})
	return last
}

// repairs reads every node's log (all its runs) and, from the nodes that
// answer, /metrics, for repairs of counters or replicas.
func repairs(ctx context.Context, c *Cluster) []Repair {
	var out []Repair
	for _, n := range c.Nodes {
		if b, err := os.ReadFile(n.LogPath); err == nil {
			out = append(out, RepairsInLog(n.ID, string(b))...)
		}
		// A secure cluster's HTTP port serves TLS only: scraped as a
		// plain request, it answered a 400 page that held no counters,
		// read as "no repairs". A node that cannot be scraped hides its
		// repair counters, so that is reported, not passed.
		var m string
		err := harness.WaitFor(ctx, 15*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var err error
			m, err = c.Metrics(rctx, n)
			return err
		})
		if err != nil {
			out = append(out, Repair{Node: n.ID, Source: "metrics", Detail: "could not scrape /metrics, so its repair counters are unknown: " + err.Error()})
			continue
		}
		out = append(out, RepairsInMetrics(n.ID, m)...)
	}
	return out
}

// dataRaces lists race detector reports in the nodes' logs.
func dataRaces(c *Cluster) []string {
	var out []string
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		s := string(b)
		for i := strings.Index(s, "WARNING: DATA RACE"); i >= 0; {
			out = append(out, fmt.Sprintf("%s (%s): %s", n.ID, n.LogPath, firstLines(s[i:], 12)))
			next := strings.Index(s[i+1:], "WARNING: DATA RACE")
			if next < 0 {
				break
			}
			i += 1 + next
		}
	}
	return out
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// writeOutputs writes the report and the history as JSON: into
// RAFTQ_CHAOS_OUT if set, otherwise into a temporary folder that is kept
// only when the run failed. A failed run names the seed and the history.
func writeOutputs(t *testing.T, h *History, r *Report) {
	dir := os.Getenv("RAFTQ_CHAOS_OUT")
	keep := dir != "" || !r.OK()
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "raftq-chaos-"); err != nil {
			t.Fatal(err)
		}
		if !keep {
			defer os.RemoveAll(dir)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("%dn-seed%d", h.Nodes, h.Seed)
	reportPath := filepath.Join(dir, "report-"+base+".json")
	historyPath := filepath.Join(dir, "history-"+base+".json")
	if err := WriteJSON(reportPath, r); err != nil {
		t.Error(err)
	}
	if err := WriteJSON(historyPath, h); err != nil {
		t.Error(err)
	}
	if l := r.Linearizability; l != nil && !l.OK() {
		// porcupine's own picture of the config history: open it in a browser.
		vizPath := filepath.Join(dir, "linearizability-"+base+".html")
		if err := l.Visualize(vizPath); err != nil {
			t.Errorf("porcupine visualization: %v", err)
		} else {
			t.Logf("linearizability visualization: %s", vizPath)
		}
	}
	if keep {
		t.Logf("report: %s\nhistory: %s", reportPath, historyPath)
	}
	if r.OK() {
		return
	}
	var b strings.Builder
	for i, v := range r.Violations {
		if i == 30 {
			fmt.Fprintf(&b, "  ... and %d more (see the report)\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  [%s] msg=%s payload=%s: %s\n", v.Invariant, v.MessageID, v.Payload, v.Detail)
	}
	t.Errorf("chaos: %d invariant violations with seed %d (replay: RAFTQ_CHAOS_SEED=%d; history: %s; re-check: RAFTQ_CHAOS_HISTORY=%s go test -run TestRecheckHistory ./test/chaos)\n%s",
		len(r.Violations), h.Seed, h.Seed, historyPath, historyPath, b.String())
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
