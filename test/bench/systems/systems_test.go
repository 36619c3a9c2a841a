package systems

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/test/bench/workload"
)

// raftqBin builds the broker once per test binary run.
func raftqBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the raftq binary")
	}
	bin, err := BuildRaftq(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func testLog(t *testing.T) *slog.Logger {
	if os.Getenv("RAFTQ_BENCH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// TestRaftqSmoke runs the whole workload, tiny, against one real node so
// that the benchmark cannot rot unnoticed. It asserts counts and the
// exactly-once verdict, never a speed.
func TestRaftqSmoke(t *testing.T) {
	bin := raftqBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	log := testLog(t)
	sys, err := RaftqStarter("raftq-1", bin, 1).Start(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()

	cfg := workload.DefaultConfig()
	cfg.Producers, cfg.Window = 2, 8
	cfg.BatchSize, cfg.BatchWindow = 10, 2
	cfg.Consumers, cfg.MaxInFlight = 2, 16
	cfg.Enqueue = workload.Limit{Messages: 200}
	cfg.EnqueueHalf = workload.Limit{Messages: 50}
	cfg.EnqueueSync = workload.Limit{Messages: 20}
	cfg.EnqueueBatch = workload.Limit{Messages: 100}
	cfg.Lifecycle = workload.Limit{Messages: 100}
	cfg.Paced, cfg.PacedRate = workload.Limit{Messages: 20}, 200
	cfg.IdleTimeout = 20 * time.Second
	res := (&workload.Runner{Cfg: cfg, Log: log}).Run(ctx, sys.Target)
	if res.Error != "" {
		t.Fatalf("run failed: %s", res.Error)
	}
	// Every client kind runs its own phases: unary and batch through the
	// plain gRPC driver, sdk through the Go SDK.
	single := map[string]int64{
		workload.PhaseEnqueue: 200, workload.PhaseEnqueueHalf: 50, workload.PhaseEnqueueSync: 20,
		workload.PhaseDrain: 270, workload.PhaseLifecycle: 100, workload.PhasePaced: 20,
	}
	want := map[string]map[string]int64{
		workload.ClientUnary: single,
		workload.ClientBatch: {workload.PhaseEnqueue: 100, workload.PhaseDrain: 100, workload.PhaseLifecycle: 100},
		workload.ClientSDK:   single,
	}
	if len(res.Phases) != 15 || len(res.SameClient) != 0 {
		t.Fatalf("%d phases (same client %v): %+v", len(res.Phases), res.SameClient, res.Phases)
	}
	for _, p := range res.Phases {
		w := want[p.Client][p.Name]
		if p.Messages != w || p.Errors != 0 || p.Aborted {
			t.Errorf("%s %s: %d messages, %d errors (%s), want %d and none", p.Client, p.Name, p.Messages, p.Errors, p.FirstError, w)
		}
		if len(p.ServerCPU) != 1 || p.ServerCPU[0].Name != "n1" {
			t.Errorf("%s %s: server cpu %+v", p.Client, p.Name, p.ServerCPU)
		}
	}
	const total = 2*(270+100+20) + 200
	if c := res.Check; c == nil || !c.OK() || c.Acked != total {
		t.Fatalf("check: %v, want %d acked", c, total)
	}
	for _, k := range []string{workload.ClientUnary, workload.ClientBatch, workload.ClientSDK} {
		if e := res.Phase(k, workload.PhaseLifecycle).EndToEnd; e == nil || e.Count != 100 {
			t.Fatalf("%s lifecycle end-to-end latency: %+v", k, e)
		}
	}
	if e := res.Phase(workload.ClientUnary, workload.PhasePaced).EndToEnd; e == nil || e.Count != 20 {
		t.Fatalf("paced end-to-end latency: %+v", e)
	}
	var tbl strings.Builder
	if err := workload.WriteTable(&tbl, []workload.SystemResult{res}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tbl.String(), fmt.Sprintf("raftq-1: exactly once: acked %d", total)) {
		t.Fatalf("table:\n%s", tbl.String())
	}
}

// TestRaftqMemorySmoke runs the issue-2 mode on a few hundred messages:
// fill, snapshot under a trickle, kill -9, restart.
func TestRaftqMemorySmoke(t *testing.T) {
	bin := raftqBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := MemoryOptions{Messages: 500, PayloadSize: 256, Batch: 50, Concurrency: 2, TrickleRate: 50, Baseline: 200 * time.Millisecond, Headers: 2, Settle: 100 * time.Millisecond}
	m := RunMemory(ctx, testLog(t), bin, o)
	if m.Error != "" {
		t.Fatal(m.Error)
	}
	if m.RSSBytes <= 0 || m.RSSAfterRestart <= 0 || m.SnapshotBytes <= 0 {
		t.Fatalf("memory readings missing: %+v", m)
	}
	if m.Expected < 500 || m.Found < m.Expected {
		t.Fatalf("after restart found %d of %d", m.Found, m.Expected)
	}
	// A tiny snapshot may finish between two trickle calls, so only the
	// baseline is sure to have samples.
	if m.TrickleBaseline.Count == 0 || m.RestartReadySecs <= 0 || m.RestartAnswerSecs > m.RestartReadySecs {
		t.Fatalf("snapshot/restart figures: %+v", m)
	}
}

func TestPeersNotInstalledSayWhy(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	_, err := NATSStarter("nats", "/nonexistent/nats-server", 3, false).Start(ctx, log)
	if err == nil || !strings.Contains(err.Error(), "nats-server binary") {
		t.Fatalf("missing nats-server: %v", err)
	}
	_, err = RabbitStarter("rabbitmq", "/nonexistent", 3).Start(ctx, log)
	if err == nil || !strings.Contains(err.Error(), "apt-get install rabbitmq-server") {
		t.Fatalf("missing rabbitmq: %v", err)
	}
}

func TestParsePerfReport(t *testing.T) {
	out := []byte(`# Samples: 10K of event 'cpu-clock'
#
# Overhead  Shared Object      Symbol
# ........  .................  ..............................
#
    12.50%  raftq              [.] runtime.scanobject                -      -
     7.25%  [kernel.kallsyms]  [k] _raw_spin_unlock_irqrestore
     3.00%  raftq              [.] google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders
`)
	got := parsePerfReport(out, 2, "")
	if len(got) != 2 || got[0].Percent != 12.5 || got[0].Symbol != "runtime.scanobject" ||
		got[1].Symbol != "_raw_spin_unlock_irqrestore" {
		t.Fatalf("parsed %+v", got)
	}
	if all := parsePerfReport(out, 10, ""); len(all) != 3 || !strings.Contains(all[2].Symbol, "operateHeaders") {
		t.Fatalf("parsed %+v", all)
	}
	children := []byte(`    40.10%     0.50%  raftq  [.] github.com/raftq/raftq/transport.(*Server).Enqueue
    30.00%    30.00%  raftq  [.] runtime.mallocgc
`)
	if got := parsePerfReport(children, 10, "raftq/raftq/"); len(got) != 1 || got[0].Percent != 40.1 ||
		got[0].Symbol != "github.com/raftq/raftq/transport.(*Server).Enqueue" {
		t.Fatalf("parsed children report %+v", got)
	}
}

// TestRaftqSecureSmoke runs the enqueue and lifecycle phases, tiny,
// against the secure three-node system, and checks that it is secured as
// its note says: a client without a token, or without TLS, is refused, and
// the bench identity may produce and consume but not manage.
func TestRaftqSecureSmoke(t *testing.T) {
	bin := raftqBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := testLog(t)
	c, err := startRaftq(ctx, log, bin, 3, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	target, d, err := c.Target(ctx, "raftq-3-secure")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	cfg := workload.DefaultConfig()
	cfg.Producers, cfg.Window = 2, 8
	cfg.Consumers, cfg.MaxInFlight = 2, 16
	cfg.Enqueue = workload.Limit{Messages: 200}
	cfg.EnqueueHalf, cfg.EnqueueSync, cfg.EnqueueBatch = workload.Limit{}, workload.Limit{}, workload.Limit{}
	cfg.Drain = true
	cfg.Lifecycle = workload.Limit{Messages: 100}
	cfg.Paced = workload.Limit{}
	// The plain gRPC client (TLS and the token by hand) and the SDK.
	cfg.Clients = []string{workload.ClientUnary, workload.ClientSDK}
	cfg.IdleTimeout = 20 * time.Second
	res := (&workload.Runner{Cfg: cfg, Log: log}).Run(ctx, target)
	if res.Error != "" {
		t.Fatalf("run failed: %s", res.Error)
	}
	want := map[string]int64{workload.PhaseEnqueue: 200, workload.PhaseDrain: 200, workload.PhaseLifecycle: 100}
	if len(res.Phases) != 2*len(want) {
		t.Fatalf("%d phases: %+v", len(res.Phases), res.Phases)
	}
	for _, p := range res.Phases {
		if p.Messages != want[p.Name] || p.Errors != 0 || p.Aborted {
			t.Errorf("%s %s: %d messages, %d errors (%s), want %d and none", p.Client, p.Name, p.Messages, p.Errors, p.FirstError, want[p.Name])
		}
	}
	if ck := res.Check; ck == nil || !ck.OK() || ck.Acked != 600 {
		t.Fatalf("check: %v", ck)
	}
	if !slices.Contains(res.Notes, secureNote) {
		t.Errorf("notes %q lack the secure note", res.Notes)
	}

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call := func(opts ...client.Option) error {
		cl, err := client.Dial(ctx, []string{leader.GRPC}, append(opts, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = cl.CreateQueue(cctx, "bench-other", nil)
		return err
	}
	for _, tc := range []struct {
		name string
		opts []client.Option
		code codes.Code
	}{
		{"TLS without a token", []client.Option{client.WithTLS(c.sec.tls.CAFile(), "", "")}, codes.Unauthenticated},
		{"the bench identity manages", d.clientOpts, codes.PermissionDenied},
		{"no TLS", []client.Option{client.WithToken(c.sec.tls.Token)}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := call(tc.opts...); status.Code(err) != tc.code {
				t.Fatalf("CreateQueue: %v, want %s", err, tc.code)
			}
		})
	}
}
