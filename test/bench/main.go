// Command bench measures raftq — and, for comparison, NATS JetStream and
// RabbitMQ quorum queues — under one workload definition. It starts every
// broker itself on loopback, runs the phases of workload.Runner, verifies
// exactly-once delivery, prints a table and writes JSON.
//
// It is a module of its own (test/bench/go.mod: the peers' clients stay
// out of the broker's go.mod); run it from this directory:
//
//	go run .                                  # raftq, 1 and 3 nodes
//	go run . -systems raftq-1,raftq-3,nats,nats-sync,rabbitmq
//	go run . -mode memory                     # issue 2 figures
//	go run . -mode throughput,memory          # what make bench-peers runs: with the issue 15 target table
//	go run . -mode throttle -throttle-compare OLD_BINARY   # issue 11, item 3
//
// See docs/benchmarks.md for how to read the output.
package main

import (
	"context"
	"debug/buildinfo"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/test/bench/systems"
	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

type options struct {
	mode        string
	systems     string
	base        string
	jsonPath    string
	targetsMD   string
	targetBases string
	raftqBin    string
	natsServer  string
	rabbitDir   string
	profileDir  string
	logLevel    string
	noFsync     bool
	memory      systems.MemoryOptions
	restart     systems.RestartOptions
	// restartCompare is a second binary the restart mode starts on the
	// same data dir ("compare"), alternating with -raftq-bin ("this").
	restartCompare string
	throttle       systems.ThrottleOptions
	compareBin     string
	cfg            workload.Config
	setupTimout    time.Duration
	waitIdle       time.Duration
}

func main() {
	o := options{cfg: workload.DefaultConfig(), memory: systems.DefaultMemoryOptions(), restart: systems.DefaultRestartOptions(), throttle: systems.DefaultThrottleOptions()}
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.StringVar(&o.mode, "mode", "throughput", "comma-separated: throughput (the workload against -systems), memory (issue 2 figures, one raftq node; feeds the memory rows of the issue 15 target table), throttle (issue 11 item 3: Apply behind a throttled backlog, one node), or all")
	clients := fs.String("clients", strings.Join(workload.ClientKinds, ","), "comma-separated client kinds to run: unary (one message per call, plain gRPC for raftq, one ack per message), batch (-batch messages per call), sdk (raftq's Go SDK; the peers' is their unary client)")
	fs.StringVar(&o.systems, "systems", "raftq-1,raftq-3", "comma-separated systems: raftq-1, raftq-3, raftq-1-unary, raftq-3-unary (producers without EnqueueStream), raftq-{1,3}-{wal,bolt} (--log-store), raftq-3-secure (TLS, mTLS Raft, gossip key, token auth), raftq-3-carry (acks carry grants: one entry per delivery cycle), nats, nats-sync, rabbitmq")
	fs.StringVar(&o.base, "base", "raftq-3", "system the comparison table divides by the others")
	fs.StringVar(&o.jsonPath, "json", "", "write the full results as JSON to this file")
	fs.StringVar(&o.targetBases, "target-bases", "", "comma-separated systems whose issue 15 target table is printed (default: -base), e.g. raftq-3,raftq-3-secure")
	fs.StringVar(&o.targetsMD, "targets-md", "", "also write issue 15's target table as Markdown to this file (for docs/benchmarks.md)")
	fs.StringVar(&o.raftqBin, "raftq-bin", "", "raftq binary to run (default: build ./cmd/raftq without -race)")
	fs.StringVar(&o.natsServer, "nats-server", "", "nats-server binary (default: ./bin/nats-server, then $PATH)")
	fs.StringVar(&o.rabbitDir, "rabbitmq-dir", "/usr/lib/rabbitmq/bin", "directory of rabbitmq-server and rabbitmqctl")
	fs.StringVar(&o.profileDir, "profile-dir", "", "record a perf CPU profile of each raftq leader during the enqueue phase into this directory")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (progress goes to stderr)")
	fs.BoolVar(&o.noFsync, "skip-fsync-probe", false, "do not measure the disk's fdatasync latency")
	fs.DurationVar(&o.setupTimout, "setup-timeout", 2*time.Minute, "how long a system may take to start")
	fs.DurationVar(&o.waitIdle, "wait-idle", 0, "before each system, wait up to this long for the machine to be idle (<15% busy over 10s): for shared machines")

	c := &o.cfg
	fs.IntVar(&c.PayloadSize, "payload", c.PayloadSize, "payload bytes per message")
	fs.IntVar(&c.Producers, "producers", c.Producers, "producers (each its own connection)")
	fs.IntVar(&c.Window, "window", c.Window, "outstanding enqueue calls per producer (enqueue, lifecycle)")
	fs.IntVar(&c.BatchSize, "batch", c.BatchSize, "messages per call of the batch client")
	fs.IntVar(&c.BatchWindow, "batch-window", c.BatchWindow, "outstanding calls per producer of the batch client")
	fs.IntVar(&c.Consumers, "consumers", c.Consumers, "consumers (each its own connection)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "unsettled deliveries per consumer")
	fs.Var(&c.Enqueue, "enqueue", "enqueue phase limit: a duration (10s), a message count (50000) or 0 (skip)")
	fs.Var(&c.EnqueueHalf, "enqueue-half", "enqueue-half phase limit (the enqueue workload paced to half the rate the enqueue phase reached)")
	fs.Var(&c.EnqueueSync, "enqueue-sync", "enqueue-sync phase limit (one outstanding call per producer)")
	fs.Var(&c.EnqueueBatch, "enqueue-batch", "the batch client's enqueue phase limit")
	fs.Var(&c.Paced, "paced", "paced phase limit (producers and consumers together at -paced-rate)")
	fs.Float64Var(&c.PacedRate, "paced-rate", c.PacedRate, "msgs/s in all of the paced phase")
	fs.Var(&c.Lifecycle, "lifecycle", "lifecycle phase limit (producers and consumers together)")
	fs.Float64Var(&c.LifecycleRate, "lifecycle-rate", c.LifecycleRate, "pace lifecycle producers to this many msgs/s in all (0: unpaced)")
	fs.BoolVar(&c.Drain, "drain", c.Drain, "run the drain phase (consume the backlog)")
	fs.DurationVar(&c.CallTimeout, "call-timeout", c.CallTimeout, "timeout of one enqueue call")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "give up waiting for deliveries after this long without one")
	fs.Int64Var(&c.MaxErrors, "max-errors", c.MaxErrors, "abort a phase after this many failed calls")

	m := &o.memory
	fs.Int64Var(&m.Messages, "memory-messages", m.Messages, "memory mode: messages to enqueue")
	fs.IntVar(&m.PayloadSize, "memory-payload", m.PayloadSize, "memory mode: payload bytes")
	fs.IntVar(&m.Batch, "memory-batch", m.Batch, "memory mode: messages per Enqueue call")
	fs.IntVar(&m.Concurrency, "memory-concurrency", m.Concurrency, "memory mode: outstanding Enqueue calls")
	fs.IntVar(&m.Headers, "memory-headers", m.Headers, "memory mode: headers per message (beside the dedup id the SDK sets)")
	fs.DurationVar(&m.Settle, "memory-settle", m.Settle, "memory mode: idle time after the last enqueue before VmRSS is read")
	fs.Float64Var(&m.TrickleRate, "trickle-rate", m.TrickleRate, "memory mode: enqueues per second during the snapshot")
	fs.DurationVar(&m.Baseline, "trickle-baseline", m.Baseline, "memory mode: trickle time before the snapshot")
	rs := &o.restart
	fs.IntVar(&rs.Tail, "restart-tail", rs.Tail, "restart mode: one-message enqueues after the snapshot (the log tail the restart replays)")
	fs.IntVar(&rs.Rounds, "restart-rounds", rs.Rounds, "restart mode: restarts per binary")
	fs.StringVar(&rs.ProfileDir, "restart-profile-dir", "", "restart mode: write a CPU profile and an execution trace of each restart here (raftq serve --startup-profile)")
	fs.StringVar(&rs.Keep, "restart-keep", "", "restart mode: copy the filled data dir here (for -restart-from)")
	fs.StringVar(&rs.From, "restart-from", "", "restart mode: restart a data dir kept by -restart-keep instead of filling one (its ports must be free)")
	fs.StringVar(&o.restartCompare, "restart-compare", "", "restart mode: also restart the same data dir with this raftq binary (e.g. one built before a change), labelled \"compare\", alternating")
	th := &o.throttle
	fs.IntVar(&th.Keys, "throttle-keys", th.Keys, "throttle mode: fairness keys, each with its own throttle key")
	fs.IntVar(&th.PerKey, "throttle-per-key", th.PerKey, "throttle mode: messages per key")
	fs.IntVar(&th.PayloadSize, "throttle-payload", th.PayloadSize, "throttle mode: payload bytes")
	fs.DurationVar(&th.Probe, "throttle-probe", th.Probe, "throttle mode: how long to probe")
	fs.StringVar(&o.compareBin, "throttle-compare", "", "throttle mode: also run this raftq binary (e.g. one built before a change), labelled \"compare\", in the same run")
	_ = fs.Parse(os.Args[1:])
	// The restart mode fills as the memory mode does (its -memory-* flags).
	o.restart.Fill = o.memory
	var err error
	if o.cfg.Clients, err = workload.ParseClients(*clients); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -clients:", err)
		os.Exit(2)
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -log-level:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, &o); err != nil {
		log.Error("bench failed", "err", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o *options) error {
	if err := o.cfg.Validate(); err != nil {
		return err
	}
	modes := map[string]bool{}
	for _, m := range strings.Split(o.mode, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case "throughput", "memory", "throttle", "restart":
			modes[m] = true
		case "all":
			modes["throughput"], modes["memory"], modes["throttle"] = true, true, true
		default:
			return fmt.Errorf("-mode %q: want throughput, memory, throttle, restart or all, or a comma-separated list", m)
		}
	}
	rep := &workload.Report{
		Started: time.Now().UTC(),
		Command: strings.Join(os.Args, " "),
		Git:     gitDescribe(ctx),
		Machine: systems.DescribeMachine(),
		LoadAvg: []string{loadAvg()},
		Config:  o.cfg,
	}
	if !o.noFsync {
		fsync, err := systems.ProbeFsync(os.TempDir(), 500)
		if err != nil {
			log.Warn("fsync probe", "err", err)
		} else {
			rep.Machine.Fsync = &fsync
		}
	}
	if o.raftqBin == "" {
		dir, err := os.MkdirTemp("", "raftq-bench-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		log.Info("building raftq (no -race)")
		if o.raftqBin, err = systems.BuildRaftq(ctx, dir); err != nil {
			return err
		}
	}
	rep.RaftqBuild = buildStamp(o.raftqBin)
	if modes["throughput"] {
		if err := throughput(ctx, log, o, rep); err != nil {
			return err
		}
	}
	if modes["throttle"] {
		bins := []workload.Binary{{Label: "this", Path: o.raftqBin}}
		if o.compareBin != "" {
			bins = append(bins, workload.Binary{Label: "compare", Path: o.compareBin})
		}
		log.Info("throttle mode: one raftq node per run", "keys", o.throttle.Keys, "per_key", o.throttle.PerKey)
		tr := systems.RunThrottle(ctx, log, bins, o.throttle)
		rep.Throttle = &tr
		fmt.Println()
		workload.WriteThrottle(os.Stdout, &tr)
	}
	if modes["memory"] {
		log.Info("memory mode: one raftq node", "messages", o.memory.Messages)
		mr := systems.RunMemory(ctx, log, o.raftqBin, o.memory)
		rep.Memory = &mr
		fmt.Println()
		workload.WriteMemory(os.Stdout, &mr)
	}
	if modes["restart"] {
		bins := []workload.Binary{{Label: "this", Path: o.raftqBin}}
		if o.restartCompare != "" {
			bins = append(bins, workload.Binary{Label: "compare", Path: o.restartCompare})
		}
		log.Info("restart mode: one raftq node, restarted from one data dir", "messages", o.restart.Fill.Messages, "rounds", o.restart.Rounds)
		rr := systems.RunRestart(ctx, log, bins, o.restart)
		rep.Restart = &rr
		fmt.Println()
		workload.WriteRestart(os.Stdout, &rr)
	}
	if modes["throughput"] && hasPeer(rep.Systems) {
		memNotRun := ""
		if !modes["memory"] {
			memNotRun = "needs -mode memory: 1M × 1 KiB on one node, minutes"
		}
		bases := o.targetBases
		if bases == "" {
			bases = o.base
		}
		var md strings.Builder
		for _, base := range strings.Split(bases, ",") {
			base = strings.TrimSpace(base)
			if base == "" {
				continue
			}
			rows := workload.Targets(rep.Systems, base, rep.Memory, memNotRun)
			rep.Targets = append(rep.Targets, rows...)
			fmt.Println()
			if err := workload.WriteTargets(os.Stdout, base, rows); err != nil {
				return err
			}
			fmt.Fprintf(&md, "%s against the peers:\n\n", base)
			workload.WriteTargetsMarkdown(&md, rows)
			md.WriteString("\n")
		}
		if o.targetsMD != "" {
			if err := os.WriteFile(o.targetsMD, []byte(md.String()), 0o644); err != nil {
				return fmt.Errorf("-targets-md: %w", err)
			}
		}
	}
	rep.LoadAvg = append(rep.LoadAvg, loadAvg())
	printMachine(rep)
	if o.jsonPath != "" {
		if err := rep.WriteJSON(o.jsonPath); err != nil {
			return err
		}
		fmt.Printf("results written to %s\n", o.jsonPath)
	}
	return ctx.Err()
}

func throughput(ctx context.Context, log *slog.Logger, o *options, rep *workload.Report) error {
	starters := map[string]systems.Starter{
		"raftq-1": systems.RaftqStarter("raftq-1", o.raftqBin, 1),
		"raftq-3": systems.RaftqStarter("raftq-3", o.raftqBin, 3),
		// The Raft log store, each explicitly (raftq-N runs the default).
		"raftq-1-wal":  systems.RaftqStarterFlags("raftq-1-wal", o.raftqBin, 1, []string{"--log-store", "wal"}),
		"raftq-3-wal":  systems.RaftqStarterFlags("raftq-3-wal", o.raftqBin, 3, []string{"--log-store", "wal"}),
		"raftq-1-bolt": systems.RaftqStarterFlags("raftq-1-bolt", o.raftqBin, 1, []string{"--log-store", "bolt"}),
		"raftq-3-bolt": systems.RaftqStarterFlags("raftq-3-bolt", o.raftqBin, 3, []string{"--log-store", "bolt"}),
		// The SDK before EnqueueStream: one unary RPC per Enqueue call.
		"raftq-1-unary": systems.RaftqStarter("raftq-1-unary", o.raftqBin, 1, client.WithUnaryEnqueue()),
		"raftq-3-unary": systems.RaftqStarter("raftq-3-unary", o.raftqBin, 3, client.WithUnaryEnqueue()),
		// TLS on every port, mTLS Raft, encrypted gossip, token auth:
		// the cost of security against raftq-3 in the same run.
		"raftq-3-secure": systems.RaftqSecureStarter("raftq-3-secure", o.raftqBin, 3),
		// Acks carry the grants of the credit they free (log version 10).
		"raftq-3-carry": systems.RaftqCarryStarter("raftq-3-carry", o.raftqBin, 3),
		"nats":          systems.NATSStarter("nats", natsBinary(o.natsServer), 3, false),
		"nats-sync":     systems.NATSStarter("nats-sync", natsBinary(o.natsServer), 3, true),
		"rabbitmq":      systems.RabbitStarter("rabbitmq", o.rabbitDir, 3),
	}
	runner := &workload.Runner{Cfg: o.cfg, Log: log}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
		runner.OnPhase = func(ctx context.Context, t workload.Target, client, phase string) func() {
			if phase != workload.PhaseEnqueue || !strings.HasPrefix(t.Name, "raftq") {
				return nil
			}
			procs := t.Procs()
			p := procs[0]
			for _, q := range procs {
				if strings.HasSuffix(q.Name, "(L)") {
					p = q
				}
			}
			stop := systems.StartPerf(ctx, log, p.Pid, filepath.Join(o.profileDir, "perf-"+t.Name+"-"+client+".data"))
			return func() {
				prof := stop()
				prof.System, prof.Process, prof.Phase = t.Name, p.Name, client+" "+phase
				rep.Profiles = append(rep.Profiles, prof)
			}
		}
	}
	for _, name := range strings.Split(o.systems, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		st, ok := starters[name]
		if !ok {
			return fmt.Errorf("-systems: unknown system %q", name)
		}
		if ctx.Err() != nil {
			break
		}
		if o.waitIdle > 0 {
			waitIdle(ctx, log, o.waitIdle)
		}
		log.Info("starting system", "system", name)
		sctx, cancel := context.WithTimeout(ctx, o.setupTimout)
		sys, err := st.Start(sctx, log)
		cancel()
		if err != nil {
			log.Error("system not run", "system", name, "err", err)
			rep.Systems = append(rep.Systems, workload.SystemResult{System: name, Error: err.Error()})
			continue
		}
		res := runner.Run(ctx, sys.Target)
		sys.Close()
		noteLoad(&res)
		rep.Systems = append(rep.Systems, res)
	}
	fmt.Println()
	if err := workload.WriteTable(os.Stdout, rep.Systems); err != nil {
		return err
	}
	if len(rep.Systems) > 1 {
		fmt.Println()
		if err := workload.WriteComparison(os.Stdout, rep.Systems, o.base); err != nil {
			return err
		}
	}
	printSecureCost(rep.Systems)
	for _, p := range rep.Profiles {
		fmt.Println()
		workload.WriteProfile(os.Stdout, p)
	}
	return nil
}

// waitIdle waits until the machine's cores were less than 15% busy over
// 10 seconds, or until max passes: other work on a shared machine skews
// every figure (the table's "other CPU" column shows how much remained).
func waitIdle(ctx context.Context, log *slog.Logger, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		before, err := workload.MachineCPU()
		if err != nil {
			return
		}
		start := time.Now()
		if harness.Sleep(ctx, 10*time.Second) != nil { // the measuring window
			return
		}
		after, err := workload.MachineCPU()
		if err != nil {
			return
		}
		busy := (after - before).Seconds() / (time.Since(start).Seconds() * float64(runtime.NumCPU()))
		if busy < 0.15 {
			return
		}
		log.Info("machine busy; waiting", "busy", fmt.Sprintf("%.0f%%", busy*100))
	}
	log.Warn("machine still busy; running anyway", "waited", max)
}

// hasPeer reports whether a peer the target table compares with ran.
func hasPeer(systems []workload.SystemResult) bool {
	for _, s := range systems {
		switch s.System {
		case workload.PeerNATSSync, workload.PeerNATS, workload.PeerRabbitMQ:
			return true
		}
	}
	return false
}

func natsBinary(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		p := filepath.Join(filepath.Dir(file), "..", "..", "bin", "nats-server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	return "nats-server"
}

// buildStamp reads the VCS revision Go stamped into a binary.
func buildStamp(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "no vcs stamp"
	}
	if modified == "true" {
		rev += " (modified)"
	}
	return rev
}

func gitDescribe(ctx context.Context) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty")
	if _, file, _, ok := runtime.Caller(0); ok {
		cmd.Dir = filepath.Dir(file)
	}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// loadAvg is the load average now, or why it is unknown.
func loadAvg() string {
	la, err := workload.LoadAverage()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return la
}

func printMachine(rep *workload.Report) {
	m := rep.Machine
	fmt.Printf("\nmachine: %d CPUs (%s), %.0f GiB, kernel %s, %s; work tree %s; raftq binary %s\n", m.CPUs, m.CPUModel, float64(m.MemBytes)/(1<<30), m.Kernel, m.Go, rep.Git, rep.RaftqBuild)
	fmt.Printf("load average (1, 5, 15 min) at start: %s; at end: %s\n", rep.LoadAvg[0], rep.LoadAvg[len(rep.LoadAvg)-1])
	if m.Fsync != nil {
		fmt.Printf("disk: 4 KiB append + fdatasync p50 %.2f ms, p99 %.2f ms (%d samples, temp dir)\n", m.Fsync.P50, m.Fsync.P99, m.Fsync.Count)
	}
}
