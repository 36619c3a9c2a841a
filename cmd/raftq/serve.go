package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/diskguard"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/transport"
	"github.com/raftq/raftq/transport/broker"
	"github.com/raftq/raftq/transport/tlsconfig"
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
		// main's context ends on SIGINT/SIGTERM: a graceful stop (see stopNode).
		RunE: func(cmd *cobra.Command, _ []string) error {
			for {
				err := runServe(cmd.Context(), o, mem)
				if !errors.Is(err, errRepairRestart) {
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
	fl.Var(&o.logStore, "log-store", "Raft log store of a new data dir: wal (segment files) or bolt (raft.db) (default: the data dir's own; for a new one, "+string(cluster.DefaultLogStore)+"); one naming the other store of a data dir that holds a log is refused")
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

// stopNode stops the node within timeout (a container runtime kills it
// after its stop timeout, 10 s by default). By default the node stays in
// the cluster, a voter if it was one, so restarts never shrink it; leave
// (--leave-on-terminate) takes it out first. The steps, each with a
// share of the time so a slow one cannot starve the next:
//  1. leave, or hand leadership over: the scheduler stops, Lease streams
//     end with a redirect to the new leader, and writes flow there;
//  2. drain the API: calls in flight finish, streams end;
//  3. stop the node (Raft, gossip, stores).
func stopNode(log *slog.Logger, b *broker.Broker, srv *transport.Server, httpSrv *http.Server, leave bool, timeout time.Duration) {
	stopBy := time.Now().Add(timeout)
	// before leaves reserve for the steps after this one.
	before := func(reserve time.Duration) (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), stopBy.Add(-reserve))
	}
	ctx, cancel := before(timeout / 4)
	if leave {
		// Forced: the flag is the operator's standing decision, even
		// below --bootstrap-expect (the reconciler removes a left member
		// at once regardless).
		if err := b.Leave(ctx, true); err != nil {
			log.Warn("leaving the cluster", "err", err)
		}
	} else if id, err := b.HandOff(ctx); err != nil {
		log.Info("no leadership hand-over before stopping", "err", err)
	} else if id != "" {
		log.Info("handed leadership over", "new_leader", id)
	}
	cancel()
	ctx, cancel = before(timeout / 8)
	srv.Stop(ctx)
	if httpSrv != nil {
		_ = httpSrv.Shutdown(ctx)
	}
	cancel()
	ctx, cancel = before(0)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		log.Warn("node shutdown", "err", err)
	}
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

// startingHandler serves the operator port while the node starts: the
// process is alive (/healthz 200) but not ready (everything else 503),
// until ready installs the node's own handler.
type startingHandler struct {
	node atomic.Pointer[http.Handler]
}

func (h *startingHandler) ready(node http.Handler) { h.node.Store(&node) }

func (h *startingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if node := h.node.Load(); node != nil {
		(*node).ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/healthz" {
		_, _ = w.Write([]byte("starting\n"))
		return
	}
	http.Error(w, "starting: restoring state from the data dir", http.StatusServiceUnavailable)
}

// errRepairRestart ends runServe when the node must start again (replica
// repair, transport/replica.go).
var errRepairRestart = errors.New("restart for replica repair")

func runServe(ctx context.Context, o *serveOptions, mem memoryBudget) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	if o.stallAfter <= 0 {
		return fmt.Errorf("--dashboard-stall-after %s: want a duration above 0", o.stallAfter)
	}
	if err := resolveNodeID(o); err != nil {
		return err
	}
	if limit := mem.goMemoryLimit(); limit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit from the cgroup", "limit_bytes", mem.bytes, "source", mem.from, "go_memory_limit", limit,
			"max_queued_bytes", o.maxQueuedBytes, "max_pending_bytes", o.maxPending)
	}
	if err := checkBinds(o); err != nil {
		return err
	}
	var tlsSrc *tlsconfig.Source
	if o.tls.Enabled() {
		if tlsSrc, err = tlsconfig.Load(o.tls, log.With("component", "tls")); err != nil {
			return err
		}
		if name := tlsSrc.NodeName(); name != o.nodeID {
			return fmt.Errorf("--tls-cert is node %q's certificate, but --node-id is %q: other nodes would refuse this one", name, o.nodeID)
		}
	}
	var gossipKeys [][]byte
	if o.gossipKeyFile != "" {
		if gossipKeys, err = readGossipKeys(o.gossipKeyFile, log); err != nil {
			return err
		}
	}
	// SIGHUP (and, for certificates, a change of the files, checked
	// every few seconds) reloads the TLS material and the gossip keyring:
	// rotation without a restart.
	rl := &reloader{log: log, tls: tlsSrc}
	rctx, stopReload := context.WithCancel(ctx)
	defer stopReload()
	reloadDone := rl.start(rctx)
	defer func() { stopReload(); <-reloadDone }()

	adv := map[string]string{}
	for name, bind := range map[string]string{"grpc": o.grpcAddr, "raft": o.raftAddr, "gossip": o.gossipAddr, "http": o.httpAddr} {
		if bind == "" {
			continue
		}
		a, err := advertise(bind, o.advertiseHost, net.InterfaceAddrs)
		if err != nil {
			return fmt.Errorf("--%s-addr: %w", name, err)
		}
		adv[name] = a
	}
	if o.advertiseGRPC != "" {
		if err := checkHostPort(o.advertiseGRPC); err != nil {
			return fmt.Errorf("--advertise-grpc-addr: %w", err)
		}
	}
	if o.advertiseHTTP != "" {
		if err := checkHostPort(o.advertiseHTTP); err != nil {
			return fmt.Errorf("--advertise-http-addr: %w", err)
		}
		if adv["http"] != "" { // no HTTP port, nothing to advertise
			adv["http"] = o.advertiseHTTP
		}
	}
	// Checked before anything starts; it reads the node's state (b) only
	// once calls arrive.
	var b *broker.Broker
	authn, err := o.auth.authenticator(tlsSrc != nil, func() *fsm.Auth { return b.State().Auth() }, log)
	if err != nil {
		return err
	}
	grpcLis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	defer grpcLis.Close()
	errc := make(chan error, 2)
	// The operator port answers from the start: restoring a large state
	// takes seconds (13 s for a million messages), during which a liveness
	// probe must see the process alive and a readiness probe must not see
	// it ready.
	httpHandler := &startingHandler{}
	var httpSrv *http.Server
	if o.httpAddr != "" {
		httpLis, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			return fmt.Errorf("--http-addr: %w", err)
		}
		if tlsSrc != nil {
			httpLis = tls.NewListener(httpLis, tlsSrc.ServerConfig("http"))
		}
		httpSrv = &http.Server{Handler: httpHandler, ReadHeaderTimeout: 10 * time.Second,
			// A refused handshake is logged by tlsconfig, once a second at most.
			ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelDebug)}
		go func() {
			if err := httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		defer httpSrv.Close() // on an early return; the normal path shuts down first
	}

	// A test-only wall clock offset (testclock.go); nil leaves the
	// broker on its own wall clock.
	var clock broker.Clock
	if o.testClockFile != "" {
		tc, err := newTestClock(o.testClockFile, log)
		if err != nil {
			return err
		}
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go tc.watch(wctx)
		clock = tc
	}
	log.Info("starting node: restoring state from the data dir", "node_id", o.nodeID, "data_dir", o.dataDir)
	started := time.Now()
	b, err = broker.New(ctx, broker.Config{
		Cluster: cluster.Config{
			NodeID:              o.nodeID,
			DataDir:             o.dataDir,
			RaftBind:            o.raftAddr,
			RaftAdvertise:       adv["raft"],
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
			LogStore:            cluster.LogStore(o.logStore),
			Version:             readBuildInfo().describe(),
			TLS:                 clusterTLS(tlsSrc),
			GossipKeys:          gossipKeys,
		},
		LeaseGrace:      o.leaseGrace,
		MaxQueuedBytes:  o.maxQueuedBytes,
		MaxPendingBytes: o.maxPending,
		MinFreeDisk:     o.minFreeDisk,
		Audit:           o.audit,
		CarryGrants:     o.carryGrants,
		Clock:           clock,
		Logger:          log,
	})
	if err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	if o.gossipKeyFile != "" {
		node := b.Node()
		rl.setGossip(func() error {
			keys, err := readGossipKeys(o.gossipKeyFile, log)
			if err != nil {
				return err
			}
			return node.SetGossipKeys(keys)
		})
	}
	srv := transport.New(transport.Config{Logger: log.With("component", "transport"), TLS: tlsSrc, MetricsTopKeys: o.metricsTopKeys, Auth: authn, Pprof: o.auth.pprof, HTTPSecure: tlsSrc != nil, DashboardStallAfter: o.stallAfter, ReplicaCheckInterval: o.replicaCheck}, b)
	go func() { errc <- srv.Serve(grpcLis) }()
	httpHandler.ready(srv.HTTPHandler())
	log.Info("raftq node started", "node_id", o.nodeID, "grpc", adv["grpc"], "grpc_clients", cmp.Or(o.advertiseGRPC, adv["grpc"]), "raft", adv["raft"], "gossip", adv["gossip"], "http", adv["http"], "data_dir", o.dataDir,
		"applied_index", b.State().AppliedIndex(), "startup", time.Since(started).Round(time.Millisecond))

	var serveErr error
	leave := o.leaveOnTerminate
	select {
	case <-ctx.Done():
		log.Info("shutting down", "leave_cluster", leave, "within", o.shutdownTimeout)
	case <-srv.Left():
		log.Info("left the cluster on request; shutting down", "within", o.shutdownTimeout)
		leave = false // done
	case <-srv.RepairRestart():
		// Removed for repair (its state diverged or is corrupt), or it
		// found its Raft state corrupt while running: the next start
		// sets the state aside, or stays out of Raft until it is removed.
		log.Warn("restarting for repair: this node's Raft state diverged or is corrupt (the lines before say which)")
		leave = false // already out of the configuration
		serveErr = errRepairRestart
	case serveErr = <-errc:
		log.Error("server failed", "err", serveErr)
	}
	stopNode(log, b, srv, httpSrv, leave, o.shutdownTimeout)
	log.Info("stopped")
	return serveErr
}

// clusterTLS is what Raft needs of the node's TLS material (nil: none).
func clusterTLS(src *tlsconfig.Source) *cluster.TLS {
	if src == nil {
		return nil
	}
	return &cluster.TLS{Server: src.NodeServerConfig("raft"), Dial: src.NodeClientConfig, PeerName: tlsconfig.PeerNodeName}
}

// logStoreFlag is --log-store: checked as it is set, so a bad value in the
// environment or a config file is refused by name before anything starts.
type logStoreFlag cluster.LogStore

func (f *logStoreFlag) String() string { return string(*f) }
func (f *logStoreFlag) Type() string   { return "wal|bolt" }
func (f *logStoreFlag) Set(s string) error {
	ls, err := cluster.ParseLogStore(s)
	if err != nil {
		return err
	}
	*f = logStoreFlag(ls)
	return nil
}
