package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/diskguard"
	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftlog"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/transport"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// serveOptions are the flags of `raftq serve` (API.md, Command line).
type serveOptions struct {
	nodeID           string
	nodeIDGiven      bool // --node-id (or RAFTQ_NODE_ID) was set
	configFile       string
	dataDir          string
	grpcAddr         string
	raftAddr         string
	gossipAddr       string
	httpAddr         string
	advertiseHost    string
	advertiseGRPC    string
	advertiseHTTP    string
	join             []string
	bootstrapExpect  int
	deadNodeTimeout  time.Duration
	leaseGrace       time.Duration
	maxQueuedBytes   int64
	maxPending       int64
	minFreeDisk      uint64
	logLevel         string
	snapThreshold    uint64
	trailingLogs     uint64
	logStore         logStoreFlag
	zone             zoneFlag
	audit            broker.AuditConfig
	carryGrants      bool
	replicaCheck     time.Duration
	shutdownTimeout  time.Duration
	leaveOnTerminate bool
	tls              tlsconfig.Files
	insecure         bool
	gossipKeyFile    string
	metricsTopKeys   int
	stallAfter       time.Duration
	auth             authOptions
	testClockFile    string // hidden, tests only: testclock.go
	startupProfile   string // hidden: startprof.go
}

func newServeCmd() *cobra.Command {
	cmd, _ := serveCommand()
	return cmd
}

// serveCommand is raftq serve and the options its flags set (config check
// parses a file into them as serve would).
func serveCommand() (*cobra.Command, *serveOptions) {
	mem := readMemoryBudget(os.DirFS("/"))
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a raftq node (with no flags: a durable single-node broker)",
		Long: `Run a raftq node. With no flags it is a working single-node broker with
its data in ./raftq-data. Every flag can also be set through an environment
variable RAFTQ_<FLAG> (upper case, '-' as '_'), e.g. RAFTQ_NODE_ID.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return err
			}
			if o.configFile != "" {
				settings, err := readConfigFile(o.configFile)
				if err != nil {
					return fmt.Errorf("--config: %w", err)
				}
				if err := applyConfig(o.configFile, settings, cmd.Flags()); err != nil {
					return fmt.Errorf("--config: %w", err)
				}
			}
			o.nodeIDGiven = cmd.Flags().Changed("node-id")
			// Before anything binds or opens the data dir.
			var errs []error
			for _, p := range checkServeOptions(o, cmd.Flags()) {
				errs = append(errs, fmt.Errorf("--%s %s: %w", p.flag, cmd.Flags().Lookup(p.flag).Value, p.err))
			}
			return errors.Join(errs...)
		},
		// main's context ends on SIGINT/SIGTERM: a graceful stop (host.Host.Run).
		RunE: func(cmd *cobra.Command, _ []string) error {
			for {
				err := runServe(cmd.Context(), o, mem)
				if !errors.Is(err, host.ErrRepairRestart) {
					return err
				}
				// A diverged replica was removed for repair: start again
				// on the same data dir, whose Raft state is set aside.
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.configFile, "config", "", "YAML file with one key per flag (node-id: n1); flags and RAFTQ_<FLAG> override it; check one with raftq config check")
	fl.StringVar(&o.nodeID, "node-id", "", "unique, stable node id (default: the id recorded in --data-dir, else the host name); recorded in the data dir on first start, and a different one is refused later")
	fl.StringVar(&o.dataDir, "data-dir", "./raftq-data", "Raft log, stable store and snapshots")
	fl.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:7400", "client API bind address")
	fl.StringVar(&o.raftAddr, "raft-addr", "127.0.0.1:7401", "Raft transport bind address")
	fl.StringVar(&o.gossipAddr, "gossip-addr", "127.0.0.1:7402", "memberlist bind address")
	fl.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:7403", "metrics and health bind address (empty = off)")
	fl.StringVar(&o.advertiseHost, "advertise-host", "", "host other nodes and clients use to reach this node (default: the bind host)")
	fl.StringVar(&o.advertiseHTTP, "advertise-http-addr", "", "host:port browsers reach this node's HTTP port at (the dashboard's links to each node, the HTTP column of cluster status) when it is not --advertise-host and the --http-addr port, e.g. a port published by Docker")
	fl.StringVar(&o.advertiseGRPC, "advertise-grpc-addr", "", "host:port clients are sent to (redirects to the leader, addresses in cluster status) when it is not where peers reach the node, e.g. a port published by Docker; peers keep using --advertise-host and the --grpc-addr port")
	fl.StringSliceVar(&o.join, "join", nil, "comma-separated gossip addresses of other nodes")
	fl.IntVar(&o.bootstrapExpect, "bootstrap-expect", 1, "voters to wait for before the first election")
	fl.DurationVar(&o.deadNodeTimeout, "dead-node-timeout", 30*time.Second, "how long a failed node stays a voter before removal")
	fl.DurationVar(&o.leaseGrace, "lease-grace", 5*time.Second, "after a failover, how long before leases of the old leader may expire")
	fl.Int64Var(&o.maxQueuedBytes, "max-queued-bytes", mem.defaultMaxQueuedBytes(), "this node's proposal for the cluster setting max-queued-bytes (what the whole cluster may hold: messages, dedup entries, recent outcomes), taken from the smallest voter when the cluster reaches log version 9, then changed with 'raftq cluster set max-queued-bytes'; before that, this node's limit when it leads (default: a quarter of memory, or of the cgroup's memory limit when lower)")
	fl.Int64Var(&o.maxPending, "max-pending-bytes", mem.defaultMaxPendingBytes(), "client writes held in front of Raft (queued and in flight) before new ones get ResourceExhausted (default: 256 MiB, or an eighth of a smaller memory or cgroup limit)")
	fl.Uint64Var(&o.minFreeDisk, "min-free-disk-bytes", diskguard.DefaultMinFree, "free space kept on the data dir's file system, besides room for the next snapshot: below it the leader refuses writes that add data (enqueue, create queue) with ResourceExhausted, while reads, acks and nacks go on")
	fl.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.Uint64Var(&o.snapThreshold, "snapshot-threshold", cluster.DefaultSnapshotThreshold, "log entries between automatic snapshots")
	fl.DurationVar(&o.stallAfter, "dashboard-stall-after", 2*time.Minute, "the dashboard flags a consumer as stalled once it holds leases, has no credit and has acked nothing for this long")
	fl.IntVar(&o.metricsTopKeys, "metrics-top-keys", 0, "export per fairness key and throttle key metrics for each queue's top N keys, the rest summed as key=\"_other\" (0 = off)")
	fl.DurationVar(&o.audit.Interval, "audit-interval", time.Second, "leader: time between counter audit ticks (negative = no audit)")
	fl.IntVar(&o.audit.Budget, "audit-budget", 64, "leader: the most queues whose counters one audit tick recounts")
	fl.DurationVar(&o.replicaCheck, "replica-check-interval", time.Minute, "leader: time between checks that every replica's state digest agrees (negative = never)")
	fl.Uint64Var(&o.trailingLogs, "trailing-logs", cluster.DefaultTrailingLogs, "log entries kept after a snapshot (followers further behind get the snapshot)")
	fl.Var(&o.zone, "zone", "this node's zone (failure domain, e.g. a rack or an availability zone): lower-case letters, digits and '-', at most 63, like a DNS label; advertised in gossip and shown by cluster status, for spreading group replicas across zones (default: none)")
	fl.Var(&o.logStore, "log-store", "Raft log store of a new data dir: wal (segment files) or bolt (raft.db) (default: the data dir's own; for a new one, "+string(raftlog.DefaultLogStore)+"); one naming the other store of a data dir that holds a log is refused")
	fl.StringVar(&o.tls.Cert, "tls-cert", "", "this node's certificate (PEM, made by raftq cert node): TLS on every port, mTLS between nodes")
	fl.StringVar(&o.tls.Key, "tls-key", "", "the key of --tls-cert (PEM)")
	fl.StringVar(&o.tls.CA, "tls-ca", "", "the CA (PEM bundle) that signs node and client certificates")
	fl.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "gossip keyring: one base64 32-byte key per line (make one with raftq cert gossip-key); the first encrypts, all are accepted; reloaded on SIGHUP")
	fl.BoolVar(&o.insecure, "insecure", false, "allow binding a non-loopback address without TLS (anyone who reaches a port owns the cluster)")
	fl.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 8*time.Second, "on SIGTERM or SIGINT, the time to hand leadership over, finish the calls in flight and stop (keep it below the container's stop timeout, 10 s by default)")
	fl.BoolVar(&o.leaveOnTerminate, "leave-on-terminate", false, "on SIGTERM or SIGINT, leave the cluster (removed from the voters) before stopping; without it a stopped node stays a voter and takes its place again when it restarts")
	fl.BoolVar(&o.carryGrants, "ack-carries-grants", false, "leader: from log version 10, grant a consumer's next messages in the entry of the ack that frees its credit (one Raft entry per delivery cycle instead of two; experimental, for benchmarks)")
	_ = fl.MarkHidden("ack-carries-grants")
	fl.StringVar(&o.testClockFile, "test-clock-offset-file", "", "TESTS ONLY: offset the node's wall clock by the duration in this file, re-read while the node runs (the chaos campaign's clock jumps)")
	_ = fl.MarkHidden("test-clock-offset-file")
	fl.StringVar(&o.startupProfile, "startup-profile", "", "write a CPU profile (PREFIX.cpu.pprof) and an execution trace (PREFIX.trace) of the start, until the node leads with its log applied (for measuring a restart)")
	_ = fl.MarkHidden("startup-profile")
	addAuthFlags(fl, &o.auth)
	return cmd, o
}

// applyEnv fills every flag not given on the command line from RAFTQ_<NAME>.
func applyEnv(fs *pflag.FlagSet) error {
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || firstErr != nil {
			return
		}
		env := "RAFTQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				firstErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	})
	return firstErr
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// resolveNodeID settles the node's id: the one given, which must match the
// one recorded in the data dir if there is one; else the recorded one; else
// the host name (recorded at the first start, so a container's random
// host name becomes its lasting id only with its volume).
func resolveNodeID(o *serveOptions) error {
	have, err := cluster.PersistedNodeID(o.dataDir)
	if err != nil {
		return err
	}
	switch {
	case o.nodeIDGiven && have != "" && o.nodeID != have:
		return fmt.Errorf("--node-id %s: the data dir %s belongs to node %s (recorded in its node-id file); "+
			"start it as --node-id %s, or give %s a new --data-dir", o.nodeID, o.dataDir, have, have, o.nodeID)
	case o.nodeIDGiven:
	case have != "":
		o.nodeID = have
	default:
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no --node-id given and no host name: %w", err)
		}
		o.nodeID = host
	}
	if o.nodeID == "" {
		return errors.New("--node-id is empty")
	}
	if o.metricsTopKeys < 0 {
		return fmt.Errorf("--metrics-top-keys %d: want 0 (off) or more", o.metricsTopKeys)
	}
	return nil
}

func runServe(ctx context.Context, o *serveOptions, mem memoryBudget) error {
	var prof *startupProfile
	if o.startupProfile != "" {
		var err error
		if prof, err = startStartupProfile(o.startupProfile); err != nil {
			return err
		}
	}
	cfg, err := hostConfig(o, mem)
	if err != nil {
		if prof != nil {
			prof.stop(slog.Default())
		}
		return err
	}
	h, err := host.New(ctx, cfg)
	if err != nil {
		if prof != nil {
			prof.stop(cfg.Logger)
		}
		return err
	}
	if prof != nil {
		group := h.Broker().Node().Group()
		go prof.stopWhen(ctx, cfg.Logger, group.LeaderReady)
	}
	idleCtx, stopIdle := context.WithCancel(ctx)
	idleDone := make(chan struct{})
	go func() { defer close(idleDone); releaseWhenIdle(idleCtx, cfg.Logger.With("component", "memory")) }()
	defer func() { stopIdle(); <-idleDone }()
	return h.Run(ctx)
}

// hostConfig checks the flags and turns them into the node's
// configuration; nothing is bound or opened yet.
func hostConfig(o *serveOptions, mem memoryBudget) (host.Config, error) {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return host.Config{}, err
	}
	if o.stallAfter <= 0 {
		return host.Config{}, fmt.Errorf("--dashboard-stall-after %s: want a duration above 0", o.stallAfter)
	}
	if err := resolveNodeID(o); err != nil {
		return host.Config{}, err
	}
	if limit := mem.goMemoryLimit(); limit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit from the cgroup", "limit_bytes", mem.bytes, "source", mem.from, "go_memory_limit", limit,
			"max_queued_bytes", o.maxQueuedBytes, "max_pending_bytes", o.maxPending)
	}
	if err := checkBinds(o); err != nil {
		return host.Config{}, err
	}
	adv := map[string]string{}
	for name, bind := range map[string]string{"grpc": o.grpcAddr, "raft": o.raftAddr, "gossip": o.gossipAddr, "http": o.httpAddr} {
		if bind == "" {
			continue
		}
		a, err := advertise(bind, o.advertiseHost, net.InterfaceAddrs)
		if err != nil {
			return host.Config{}, fmt.Errorf("--%s-addr: %w", name, err)
		}
		adv[name] = a
	}
	if o.advertiseGRPC != "" {
		if err := checkHostPort(o.advertiseGRPC); err != nil {
			return host.Config{}, fmt.Errorf("--advertise-grpc-addr: %w", err)
		}
	}
	if o.advertiseHTTP != "" {
		if err := checkHostPort(o.advertiseHTTP); err != nil {
			return host.Config{}, fmt.Errorf("--advertise-http-addr: %w", err)
		}
		if adv["http"] != "" { // no HTTP port, nothing to advertise
			adv["http"] = o.advertiseHTTP
		}
	}
	// Checked before anything starts.
	acfg, err := o.auth.config(o.tls.Enabled(), log)
	if err != nil {
		return host.Config{}, err
	}
	cfg := host.Config{
		Node: broker.Config{
			Cluster: cluster.Config{
				NodeID:              o.nodeID,
				DataDir:             o.dataDir,
				GossipBind:          o.gossipAddr,
				GossipAdvertise:     adv["gossip"],
				GRPCAdvertise:       adv["grpc"],
				ClientGRPCAdvertise: o.advertiseGRPC,
				HTTPAdvertise:       adv["http"],
				Join:                o.join,
				BootstrapExpect:     o.bootstrapExpect,
				DeadNodeTimeout:     o.deadNodeTimeout,
				SnapshotThreshold:   o.snapThreshold,
				TrailingLogs:        o.trailingLogs,
				LogStore:            raftlog.LogStore(o.logStore),
				Version:             readBuildInfo().describe(),
				Zone:                string(o.zone),
			},
			LeaseGrace:           o.leaseGrace,
			MaxQueuedBytes:       o.maxQueuedBytes,
			MaxPendingBytes:      o.maxPending,
			MinFreeDisk:          o.minFreeDisk,
			Audit:                o.audit,
			CarryGrants:          o.carryGrants,
			ReplicaCheckInterval: o.replicaCheck,
		},
		GRPCAddr:      o.grpcAddr,
		HTTPAddr:      o.httpAddr,
		RaftAddr:      o.raftAddr,
		RaftAdvertise: adv["raft"],
		API: transport.Config{
			MetricsTopKeys:      o.metricsTopKeys,
			Pprof:               o.auth.pprof,
			DashboardStallAfter: o.stallAfter,
		},
		Auth:                acfg,
		TLSFiles:            o.tls,
		ReloadOnSIGHUP:      true,
		TestClockOffsetFile: o.testClockFile,
		ShutdownTimeout:     o.shutdownTimeout,
		LeaveOnStop:         o.leaveOnTerminate,
		Logger:              log,
	}
	if path := o.gossipKeyFile; path != "" {
		cfg.GossipKeys = func() ([][]byte, error) { return readGossipKeys(path, log) }
	}
	return cfg, nil
}

// logStoreFlag is --log-store: checked as it is set, so a bad value in the
// environment or a config file is refused by name before anything starts.
type logStoreFlag raftlog.LogStore

func (f *logStoreFlag) String() string { return string(*f) }
func (f *logStoreFlag) Type() string   { return "wal|bolt" }
func (f *logStoreFlag) Set(s string) error {
	ls, err := raftlog.ParseLogStore(s)
	if err != nil {
		return err
	}
	*f = logStoreFlag(ls)
	return nil
}

// zoneFlag is --zone: checked as it is set, so a bad value in the
// environment or a config file is refused by name before anything starts.
type zoneFlag string

func (f *zoneFlag) String() string { return string(*f) }
func (f *zoneFlag) Type() string   { return "name" }
func (f *zoneFlag) Set(s string) error {
	if err := membership.CheckZone(s); err != nil {
		return err
	}
	*f = zoneFlag(s)
	return nil
}
