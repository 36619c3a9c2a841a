package transport

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/dashboard"
	"github.com/raftq/raftq/metagroup"
	"github.com/raftq/raftq/peers"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/tlsconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// MaxRequestBytes is the largest request a node reads; clients check it
// before sending (client.MaxRequestBytes).
const MaxRequestBytes = peers.MaxMessageBytes

// Config tunes the server.
type Config struct {
	Logger *slog.Logger
	// LeaderWait bounds how long a call waits for a leader to be elected
	// before failing with NO_LEADER (default 3s, capped by the deadline).
	LeaderWait time.Duration
	// Registry receives the server's metrics; nil = a private registry.
	Registry *prometheus.Registry
	// TLS, when set, serves gRPC over TLS (a client certificate is
	// verified when given) and makes calls to other nodes (forwarding,
	// status, digests) over mutual TLS with node certificates. nil:
	// plaintext.
	TLS *tlsconfig.Source
	// MetricsTopKeys, when above 0, adds per fairness key and per throttle
	// key series: the top N keys of each queue, the rest summed under
	// key="_other" (raftq serve --metrics-top-keys).
	MetricsTopKeys int
	// Auth authenticates and authorises every call (auth); nil
	// = auth off (every caller may do everything).
	Auth *auth.Authenticator
	// Pprof serves /debug/pprof on the HTTP port (to admins when auth is
	// on).
	Pprof bool
	// HTTPSecure marks the HTTP port's cookies Secure (it serves TLS).
	HTTPSecure bool
	// DashboardStallAfter is how long a consumer holding leases with no
	// credit may go without an ack before the dashboard flags it (0: 2m).
	DashboardStallAfter time.Duration
	// Peers is the node's connections to the other nodes (forwarding,
	// status, verify digests), owned by the host, which closes it
	// after Stop; nil = a pool of the server's own (over TLS and Auth),
	// closed by Stop.
	Peers *peers.Pool
	// Meta is the node's meta group: from the handover it serves the
	// writes of identities, tokens, grants and settings (meta.go), and
	// its replica the reads of them. nil: none (the data group keeps
	// them, as before the handover).
	Meta *metagroup.Group
	// Groups finds a data group the meta group placed on this node by
	// id (the host's group manager, groups.Manager.Get): a Broker call
	// for a queue placed on it is served against it (route.go), and a
	// local-only Status naming one answers from it (group.go: a placed
	// group's leader asks a nonvoter for its applied index). nil: the
	// legacy group alone (the broker New is given).
	Groups func(id string) (*broker.Broker, bool)
	// Placements is where queues are placed (route.go); nil: the meta
	// group's replica (Meta.FSM()). Read only while meta is active.
	Placements Placements
	// Leaders names the leader of a data group this node runs no
	// replica of, from gossip (GossipLeaders); nil: none known.
	Leaders func(id string) (broker.Route, bool)
	// Placer places a new queue when meta records several data groups;
	// nil: every queue on the legacy group.
	Placer Placer
}

// Server serves the Broker and Cluster services of one node.
type Server struct {
	cfg Config
	log *slog.Logger
	// legacy is the data group New was given (the legacy group, "data"):
	// the node-wide calls' (Status, Verify, Backup, the HTTP port,
	// metrics) and every queue's until meta places it elsewhere. A
	// Broker call is served against its queue's group (callGroup).
	legacy *dataGroup
	// groupCache wraps the other groups' brokers (localGroup).
	groupCache
	peers *peers.Pool
	// ownPeers: peers is the server's own, closed by Stop.
	ownPeers bool
	// settles tracks the acks and nacks in progress, for Lease streams
	// that end (settle.go).
	settles *settleGate

	grpc    *grpc.Server
	health  *health.Server
	metrics *metrics

	// stopping is closed when Stop begins, ending EnqueueStreams that
	// would otherwise hold GracefulStop until its deadline.
	stopping chan struct{}
	// left is closed once this node has left the cluster (a Leave call):
	// the process should stop.
	left     chan struct{}
	leftOnce sync.Once

	// dash is the web UI on the HTTP port; its depth sampler runs until
	// Stop (stopDash, then dashDone).
	dash *dashboard.Dashboard
	// dashHolds are the leases the dashboard's "get" holds open.
	dashHolds *leaseHolds
	// processStart is when the process started, read once.
	processStart func() time.Time
	stopDash     context.CancelFunc
	dashDone     chan struct{}

	// corruptDone is closed when corruptLoop has returned; stopCorrupt
	// ends it.
	corruptDone chan struct{}
	stopCorrupt context.CancelFunc
	// restart is closed when this diverged node has been removed and has
	// asked for its Raft state to be set aside: the process should start
	// the node again (replica.go).
	restart     chan struct{}
	restartOnce sync.Once
	closeOnce   sync.Once
}

// streamWorkers is the gRPC server's pool of handler goroutines
// (grpc.NumStreamWorkers): as many as the unary calls a busy node holds
// in flight, each waiting for its commit; a call that finds every worker
// busy runs on a new goroutine, as without a pool.
const streamWorkers = 1024

// New builds the gRPC server of node b; Serve starts it.
func New(cfg Config, b *broker.Broker) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = 3 * time.Second
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Auth == nil {
		cfg.Auth = auth.New(auth.Config{Mode: auth.ModeNone})
	}
	s := &Server{
		cfg:          cfg,
		log:          cfg.Logger,
		legacy:       newDataGroup(broker.GroupID, b),
		groupCache:   groupCache{groups: map[string]*dataGroup{}},
		peers:        cfg.Peers,
		settles:      newSettleGate(),
		health:       health.NewServer(),
		stopping:     make(chan struct{}),
		dashHolds:    newLeaseHolds(),
		processStart: sync.OnceValue(processStartTime),
		left:         make(chan struct{}),

		corruptDone: make(chan struct{}),
		restart:     make(chan struct{}),
	}
	if s.peers == nil {
		s.peers, s.ownPeers = peers.New(cfg.TLS, cfg.Auth.ClientUnary), true
	}
	s.metrics = newMetrics(cfg.Registry, s)
	var creds []grpc.ServerOption
	if cfg.TLS != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(cfg.TLS.ServerConfig("grpc"))))
	}
	s.grpc = grpc.NewServer(append(creds,
		// Auth runs before routing and every handler: nothing is read or
		// changed for a caller it refuses.
		grpc.UnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.metrics.stream, cfg.Auth.StreamInterceptor),
		grpc.InTapHandle(s.settles.tap),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		// Reused handler goroutines keep their grown stacks: profiles of a
		// busy leader showed stack growth at ~8% of CPU without them. A
		// unary call holds its worker until its entry commits, so the
		// pool must cover the calls in flight, not the cores: with 64,
		// 1,024 one-message Enqueues in flight (4 connections x 256) ran
		// at most 64 of them on a worker, and stack growth
		// (runtime.copystack) was 11-19% of the leader's CPU; with
		// streamWorkers it is gone from the enqueue profile
		// (docs/benchmarks.md, Issue 24: the unary path). An idle worker
		// costs its stack, which the GC shrinks.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)...)
	raftqv1.RegisterBrokerServer(s.grpc, brokerService{Server: s})
	raftqv1.RegisterClusterServer(s.grpc, &clusterService{s: s})
	raftqv1.RegisterAuthServer(s.grpc, authService{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.startDashboard()
	cctx, ccancel := context.WithCancel(context.Background())
	s.stopCorrupt = ccancel
	go s.corruptLoop(cctx)
	return s
}

// unary is the server's one unary interceptor: metrics around auth around
// routing (forwardUnary), as plain calls. Chained interceptors would cost
// a closure per stage on every call, since grpc builds each stage's next
// handler on the fly.
func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := s.admitted(ctx, req, info, handler)
	s.metrics.observeUnary(info.FullMethod, start, err)
	return resp, err
}

// admitted runs a call auth lets through (auth.AdmitUnary)
// and routes it.
func (s *Server) admitted(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, c, err := s.cfg.Auth.AdmitUnary(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	resp, err := s.forwardUnary(ctx, req, info, handler)
	return c.Finish(ctx, resp, err)
}

// Left is closed once the node has left the cluster on a Leave call; the
// process should then stop (Stop, then the broker's Close).
func (s *Server) Left() <-chan struct{} { return s.left }

// startDashboard builds the web UI and starts its depth sampler.
func (s *Server) startDashboard() {
	dash, err := dashboard.New(dashboard.Config{Backend: dashBackend{s: s}, Logger: s.log, StallAfter: s.cfg.DashboardStallAfter})
	if err != nil {
		// Only the embedded templates can fail here, fixed at build time
		// and parsed by the dashboard's tests.
		panic(err)
	}
	s.dash = dash
	ctx, cancel := context.WithCancel(context.Background())
	s.stopDash, s.dashDone = cancel, make(chan struct{})
	go func() {
		defer close(s.dashDone)
		dash.Run(ctx)
	}()
}

// Serve accepts gRPC connections on lis until Stop.
func (s *Server) Serve(lis net.Listener) error {
	return s.grpc.Serve(lis)
}

// Stop ends every stream and closes connections, waiting up to ctx for
// in-flight unary calls.
func (s *Server) Stop(ctx context.Context) {
	s.closeOnce.Do(func() {
		close(s.stopping)
		s.health.Shutdown()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
		s.stopDash()
		<-s.dashDone
		s.dashHolds.wait() // stopping ended them; their streams close before the peers do
		s.stopCorrupt()
		<-s.corruptDone
		if s.ownPeers {
			s.peers.Close()
		}
	})
}
