// Package host is the composition root: a Host is one raftq node, the
// only place where its parts are built, started and stopped. It owns the
// listeners (gRPC, HTTP and the Raft port here; gossip through the
// cluster node), the TLS material and its reload, the peer connections,
// the metrics registry, the data group (broker.Broker: Raft, the queue
// state machine, the scheduler) and the API and HTTP servers. `raftq
// serve` turns its flags into a Config and runs a Host; every test that
// needs a node builds it here too (internal/testcluster).
//
// The start order and the stop order are written once, in New and in
// stop; DESIGN.md says why they are what they are. Nothing imports this
// package but cmd/raftq and tests.
package host

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftq/raftq/acl"
	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/groups"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/metagroup"
	"github.com/raftq/raftq/peers"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/transport"
)

// DefaultShutdownTimeout is Run's budget for a graceful stop (raftq serve
// --shutdown-timeout).
const DefaultShutdownTimeout = 8 * time.Second

// Config is everything a node is built from.
type Config struct {
	// Node configures the data group. Its Cluster part names the node
	// (NodeID), its data dir, the Raft and gossip binds and what gossip
	// advertises; an empty Cluster.GRPCAdvertise is the gRPC listener's
	// address. The host sets Cluster.TLS, Cluster.GossipKeys,
	// Cluster.PeerProgress, Peers, Clock (with TestClockOffsetFile) and
	// Logger.
	Node broker.Config
	// GRPCAddr is the client API's bind address.
	GRPCAddr string
	// HTTPAddr is the operator port's bind address (metrics, health, the
	// dashboard); "" = no HTTP port.
	HTTPAddr string
	// RaftAddr is the Raft port's bind address; RaftAdvertise the
	// address other nodes dial (default RaftAddr, which must then be a
	// specific address). A host name stays a name: each dial resolves it.
	RaftAddr, RaftAdvertise string
	// API tunes the gRPC server. The host sets its Logger, Registry
	// (when nil), TLS, Auth, Peers and HTTPSecure.
	API transport.Config
	// Auth configures authentication (mode, bootstrap token, admin CN).
	// The host sets its State (the replicated auth state), NodeTLS and,
	// when nil, its Logger.
	Auth auth.Config
	// TLSFiles, when set, is the node's TLS material, loaded here (its
	// certificate must be node NodeID's), watched for changes and
	// reloaded. TLS, when set instead, is material already loaded (tests).
	// Neither: plaintext.
	TLSFiles tlsconfig.Files
	TLS      *tlsconfig.Source
	// GossipKeys reads the gossip keyring, at start and on every reload
	// (SIGHUP); nil = unencrypted gossip.
	GossipKeys func() ([][]byte, error)
	// ReloadOnSIGHUP: SIGHUP reloads the TLS material and the gossip
	// keyring (and no longer ends the process). For the process's own
	// node; tests leave it off.
	ReloadOnSIGHUP bool
	// TestClockOffsetFile, TESTS ONLY: offset the node's wall clock by the
	// duration in this file, re-read while the node runs (testclock.go).
	TestClockOffsetFile string
	// ShutdownTimeout bounds Run's graceful stop (0 =
	// DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// LeaveOnStop: when Run's context ends, leave the cluster (removed
	// from the voters) before stopping.
	LeaveOnStop bool
	// Logger receives every component's logs; nil = slog.Default().
	Logger *slog.Logger
}

// ErrRepairRestart ends Run when the node must be started again on the
// same data dir: it was removed for replica repair, or found its Raft
// state corrupt (transport/replica.go, raftgroup/corrupt.go).
var ErrRepairRestart = errors.New("restart for replica repair")

// Host is one running node. Its methods are safe for concurrent use.
type Host struct {
	cfg Config
	log *slog.Logger
	tls *tlsconfig.Source // nil: plaintext

	reload     *reloader
	stopBG     context.CancelFunc // ends the reloader and the test clock
	bg         sync.WaitGroup
	grpcLis    net.Listener
	httpLis    net.Listener  // nil: no HTTP port
	httpSrv    *http.Server  // nil: no HTTP port
	httpServed chan struct{} // closed when httpSrv.Serve returned
	// raftPort is the Raft port: one listener for every Raft group of
	// the node (raftmux), closed after the data group.
	raftPort *raftmux.Mux
	registry *prometheus.Registry
	peers    *peers.Pool
	group    *broker.Broker
	meta     *metagroup.Group // the meta group (closed before the data group)
	// groups runs the data groups the meta group places here, besides
	// the legacy one (closed before the meta group).
	groups   *groups.Manager
	authn    *auth.Authenticator
	api      *transport.Server
	served   chan struct{} // closed when the gRPC server's Serve returned
	serveErr error         // what it returned (read after served)
	errc     chan error    // a server that failed while running

	stopOnce sync.Once
	stopErr  error
}

// New builds and starts a node: it binds its ports, restores the data
// group from the data dir (the HTTP port answers /healthz meanwhile),
// joins or bootstraps the cluster and serves the API. ctx bounds the
// start only; the node runs until Run returns or Close.
func New(ctx context.Context, cfg Config) (_ *Host, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	id := cfg.Node.Cluster.NodeID
	if id == "" {
		return nil, errors.New("host: node id is empty")
	}
	h := &Host{cfg: cfg, log: cfg.Logger, tls: cfg.TLS, errc: make(chan error, 2), served: make(chan struct{})}
	// Whatever started before a failure stops again, in the stop order.
	defer func() {
		if err != nil {
			h.abort()
		}
	}()
	log := cfg.Logger

	// 1. TLS material, checked against the node's id: other nodes would
	//    refuse a node presenting another node's certificate.
	if cfg.TLSFiles.Enabled() {
		if h.tls, err = tlsconfig.Load(cfg.TLSFiles, log.With("component", "tls")); err != nil {
			return nil, err
		}
		if name := h.tls.NodeName(); name != id {
			return nil, fmt.Errorf("--tls-cert is node %q's certificate, but --node-id is %q: other nodes would refuse this one", name, id)
		}
	}
	var gossipKeys [][]byte
	if cfg.GossipKeys != nil {
		if gossipKeys, err = cfg.GossipKeys(); err != nil {
			return nil, err
		}
	}

	// 2. Reloads: SIGHUP (and, for certificates, a change of the files,
	//    checked every few seconds) reloads the TLS material and the
	//    gossip keyring: rotation without a restart. Started before the
	//    restore, which can take seconds, so a SIGHUP meanwhile does not
	//    end the process.
	bg, stopBG := context.WithCancel(context.Background())
	h.stopBG = stopBG
	h.reload = &reloader{log: log, tls: h.tls, sighup: cfg.ReloadOnSIGHUP}
	reloadDone := h.reload.start(bg)
	h.bg.Go(func() { <-reloadDone })

	// 3. The listeners. The operator port answers from the start:
	//    restoring a large state takes seconds (13 s for a million
	//    messages), during which a liveness probe must see the process
	//    alive and a readiness probe must not see it ready.
	if h.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	starting := &startingHandler{}
	if cfg.HTTPAddr != "" {
		if h.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("--http-addr: %w", err)
		}
		lis := h.httpLis
		if h.tls != nil {
			lis = tls.NewListener(lis, h.tls.ServerConfig("http"))
		}
		h.httpSrv = &http.Server{Handler: starting, ReadHeaderTimeout: 10 * time.Second,
			// A refused handshake is logged by tlsconfig, once a second at most.
			ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelDebug)}
		h.httpServed = make(chan struct{})
		go func() {
			defer close(h.httpServed)
			if err := h.httpSrv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				h.errc <- err
			}
		}()
	}

	// 4. The node's clock: a test-only wall clock offset (testclock.go),
	//    else the data group's own wall clock.
	ncfg := cfg.Node
	if cfg.TestClockOffsetFile != "" {
		tc, err := newTestClock(cfg.TestClockOffsetFile, log)
		if err != nil {
			return nil, err
		}
		h.bg.Go(func() { tc.watch(bg) })
		ncfg.Clock = tc
	}

	// 5. The connections to the other nodes. They need only the TLS
	//    material and what this node sends as its credentials, so they
	//    exist before everything that calls a peer.
	acfg := cfg.Auth
	acfg.NodeTLS = h.tls != nil
	if acfg.Logger == nil {
		acfg.Logger = log.With("component", "audit")
	}
	h.peers = peers.New(h.tls, auth.NewForwarder(acfg).ClientUnary)

	// 6. The Raft port: every Raft group of the node registers itself on
	//    it as it opens (today the data group, also the port's legacy
	//    group: a connection that opens with no preamble, as every build
	//    before the multiplexer sends, is the data group's).
	ln, adv, err := raftmux.Listen(ctx, cfg.RaftAddr, cfg.RaftAdvertise)
	if err != nil {
		return nil, err
	}
	if h.raftPort, err = raftmux.New(ln, adv, raftmux.Config{TLS: raftTLS(h.tls), Log: log.With("component", "cluster", "node", id),
		Legacy: broker.GroupID}); err != nil {
		return nil, fmt.Errorf("raft port: %w", err)
	}

	// 7. The data group: the state machine restores from the data dir and
	//    the Raft node joins or bootstraps. The leader asks a joining node
	//    for its progress, and a follower's counter audit asks the leader
	//    for recounts, through the peers.
	ncfg.Logger = log
	ncfg.Peers = h.peers
	ncfg.RaftPort = h.raftPort
	ncfg.Cluster.GossipKeys = gossipKeys
	ncfg.Cluster.PeerProgress = h.peers.Progress
	if ncfg.Cluster.GRPCAdvertise == "" {
		ncfg.Cluster.GRPCAdvertise = h.grpcLis.Addr().String()
	}
	metaFSM := meta.New(meta.Options{Logger: log.With("group", meta.MetaGroupID),
		// A newer meta entry halts the meta state machine (it applies
		// nothing more, so its state stays a prefix of the log); the
		// node keeps serving from the data group and says why.
		Fatal: func(msg string) { log.Error("the meta group stopped applying its log", "err", msg) }})
	ncfg.Meta = metaFSM
	h.cfg.Node = ncfg
	log.Info("starting node: restoring state from the data dir", "node_id", id, "data_dir", ncfg.Cluster.DataDir)
	started := time.Now()
	if h.group, err = broker.New(ctx, ncfg); err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	if cfg.GossipKeys != nil {
		node := h.group.Node()
		h.reload.setGossip(func() error {
			keys, err := cfg.GossipKeys()
			if err != nil {
				return err
			}
			return node.SetGossipKeys(keys)
		})
	}

	// 8. The meta group, on the same Raft port and in DATA/meta: every
	//    node runs it (a voter or a nonvoter); the data log's handover
	//    names its founders, and until then it has no state.
	data := h.group.State().Reader()
	ms := h.group.Node().Membership()
	now := time.Now
	if ncfg.Clock != nil {
		now = ncfg.Clock.Now
	}
	c := ncfg.Cluster
	if h.meta, err = metagroup.Open(metagroup.Config{
		NodeID: id, DataDir: c.DataDir, Port: h.raftPort,
		Data:          dataGroup{Reader: data, group: h.group.Node().Group()},
		GRPCAdvertise: c.GRPCAdvertise, ClientGRPCAdvertise: c.ClientGRPCAdvertise,
		APIAddrs: ms.APIAddrs, PeerChanges: ms.Changes, Preambles: ms.PreamblesAt,
		Nodes: func(id string) (string, bool) {
			m, _ := ms.MetaOf(id) // zero (no zone, disk not low) when unheard
			return m.Zone, m.DiskLow
		},
		Now:              now,
		HeartbeatTimeout: c.HeartbeatTimeout, ElectionTimeout: c.ElectionTimeout, LeaderLeaseTimeout: c.LeaderLeaseTimeout,
		Logger: log,
	}, metaFSM); err != nil {
		h.group.Close(context.Background())
		return nil, fmt.Errorf("start the meta group: %w", err)
	}

	// 9. The group manager: every data group the meta group's records
	//    place on this node, beside the legacy one, on the same Raft
	//    port and membership, in DATA/groups/<id>. After meta, whose
	//    records it follows; a placed group's leader asks a replica for
	//    its progress through the peers.
	mr := h.meta.Raft()
	if h.groups, err = groups.New(groups.Config{
		NodeID: id, DataDir: c.DataDir, Port: h.raftPort, Membership: ms, Meta: metaFSM, Legacy: h.group,
		MetaCaughtUp: func() bool {
			return mr.Leadership().LeaderKnown() && mr.AppliedIndex() >= mr.Raft().CommitIndex()
		},
		Broker: ncfg, Progress: h.peers.GroupProgress, ClusterID: h.group.Node().ClusterID,
		Logger: log,
	}); err != nil {
		h.meta.Close()
		h.group.Close(context.Background())
		return nil, fmt.Errorf("start the group manager: %w", err)
	}

	// 10. Authentication, over the replicated auth state: the meta
	//    group's once it is seeded, the data group's before (frozen
	//    there from the handover until the seed copies it).
	acfg.State = func() *acl.Auth {
		if a := metaFSM.SeededAuth(); a != nil {
			return a
		}
		return data.Auth()
	}
	h.authn = auth.New(acfg)

	// 11. The API and the HTTP port's handler.
	api := cfg.API
	h.registry = api.Registry
	if h.registry == nil {
		h.registry = prometheus.NewRegistry()
	}
	api.Registry = h.registry
	if api.Logger == nil {
		api.Logger = log.With("component", "transport")
	}
	api.TLS, api.Auth, api.Peers, api.HTTPSecure, api.Meta = h.tls, h.authn, h.peers, h.tls != nil, h.meta
	if api.Groups == nil { // a test may hand a node groups of its own
		api.Groups = h.groups.Get
	}
	if api.Placer == nil {
		api.Placer = h.meta // new queues placed at meta's leader (issue 22)
	}
	api.Leaders = transport.GossipLeaders(ms.GroupLeader, ms.APIAddrs) // groups with no replica here
	h.api = transport.New(api, h.group)
	go func() {
		defer close(h.served)
		h.serveErr = h.api.Serve(h.grpcLis)
		if h.serveErr != nil {
			h.errc <- h.serveErr
		}
	}()
	starting.ready(h.api.HTTPHandler())
	log.Info("raftq node started", "node_id", id, "grpc", c.GRPCAdvertise, "grpc_clients", cmp.Or(c.ClientGRPCAdvertise, c.GRPCAdvertise),
		"raft", h.raftPort.Addr().String(), "gossip", c.GossipAdvertise, "http", c.HTTPAdvertise, "data_dir", c.DataDir,
		"applied_index", h.group.State().Reader().AppliedIndex(), "startup", time.Since(started).Round(time.Millisecond))
	return h, nil
}

// Run serves until ctx ends (a graceful stop: leadership handed over, or
// the cluster left with Config.LeaveOnStop), the node leaves the cluster
// on request, it must restart for repair (ErrRepairRestart), or a server
// fails (its error). It stops the node before it returns.
func (h *Host) Run(ctx context.Context) error {
	var err error
	leave := h.cfg.LeaveOnStop
	select {
	case <-ctx.Done():
		h.log.Info("shutting down", "leave_cluster", leave, "within", h.cfg.ShutdownTimeout)
	case <-h.api.Left():
		h.log.Info("left the cluster on request; shutting down", "within", h.cfg.ShutdownTimeout)
		leave = false // done
	case <-h.api.RepairRestart():
		// Removed for repair (its state diverged or is corrupt), or it
		// found its Raft state corrupt while running: the next start
		// sets the state aside, or stays out of Raft until it is removed.
		h.log.Warn("restarting for repair: this node's Raft state diverged or is corrupt (the lines before say which)")
		leave = false // already out of the configuration
		err = ErrRepairRestart
	case err = <-h.errc:
		h.log.Error("server failed", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), h.cfg.ShutdownTimeout)
	defer cancel()
	h.stop(sctx, true, leave)
	h.log.Info("stopped")
	return err
}

// Close stops the node at once, within ctx: no leadership hand-over, and
// the node stays a member of the cluster (a voter, if it was one), as a
// process that is killed. It returns what the servers and the data group
// reported; a second Close returns the same.
func (h *Host) Close(ctx context.Context) error {
	h.stop(ctx, false, false)
	return h.stopErr
}

// stop is the one stop order, the start order reversed, each step with a
// share of ctx's time so a slow one cannot starve the next (a container
// runtime kills the process after its stop timeout, 10 s by default):
//  1. with handOver, leave (with leave) or hand leadership over: the
//     scheduler stops, Lease streams end with a redirect to the new
//     leader, and writes flow there;
//  2. drain the API and the HTTP port: calls in flight finish, streams
//     end;
//  3. stop the placed data groups, the meta group, then the legacy data
//     group (Raft, gossip, stores), then the Raft port;
//  4. close the peer connections, then the reloader and the test clock.
func (h *Host) stop(ctx context.Context, handOver, leave bool) {
	h.stopOnce.Do(func() {
		var errs []error
		stopBy, bounded := ctx.Deadline()
		timeout := time.Until(stopBy)
		// before leaves reserve for the steps after this one.
		before := func(reserve time.Duration) (context.Context, context.CancelFunc) {
			if !bounded {
				return context.WithCancel(ctx)
			}
			return context.WithDeadline(ctx, stopBy.Add(-reserve))
		}
		if handOver {
			sctx, cancel := before(timeout / 4)
			if leave {
				// Forced: the flag is the operator's standing decision,
				// even below --bootstrap-expect (the reconciler removes a
				// left member at once regardless).
				if err := h.group.Leave(sctx, true); err != nil {
					h.log.Warn("leaving the cluster", "err", err)
				}
			} else if id, err := h.group.HandOff(sctx); err != nil {
				h.log.Info("no leadership hand-over before stopping", "err", err)
			} else if id != "" {
				h.log.Info("handed leadership over", "new_leader", id)
			}
			cancel()
		}
		sctx, cancel := before(timeout / 8)
		h.api.Stop(sctx)
		<-h.served
		if h.serveErr != nil {
			errs = append(errs, fmt.Errorf("serve gRPC: %w", h.serveErr))
		}
		if h.httpSrv != nil {
			_ = h.httpSrv.Shutdown(sctx)
			_ = h.httpSrv.Close()
			<-h.httpServed
		}
		cancel()
		// The placed data groups first (a leader hands each over when
		// handOver; they read meta's records), then the meta group: it
		// lives in the data dir, whose lock the data group holds, and
		// reads the data group's state.
		sctx, cancel = before(timeout / 12)
		gctx := sctx
		if !handOver {
			// Close: no hand-over, as a killed process.
			var gcancel context.CancelFunc
			gctx, gcancel = context.WithCancel(sctx)
			gcancel()
		}
		if err := h.groups.Close(gctx); err != nil {
			h.log.Warn("data groups shutdown", "err", err)
			errs = append(errs, fmt.Errorf("data groups shutdown: %w", err))
		}
		cancel()
		sctx, cancel = before(timeout / 16)
		var merr error
		if handOver {
			merr = h.meta.Shutdown(sctx)
		} else {
			merr = h.meta.Close()
		}
		if merr != nil {
			h.log.Warn("meta group shutdown", "err", merr)
			errs = append(errs, fmt.Errorf("meta group shutdown: %w", merr))
		}
		cancel()
		sctx, cancel = before(0)
		if err := h.group.Close(sctx); err != nil {
			h.log.Warn("node shutdown", "err", err)
			errs = append(errs, fmt.Errorf("node shutdown: %w", err))
		}
		cancel()
		// Raft's transport closed the data group's layer; the port, and
		// every connection still on it, close here.
		if err := h.raftPort.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("raft port: %w", err))
		}
		h.peers.Close()
		h.stopBG()
		h.bg.Wait()
		h.stopErr = errors.Join(errs...)
	})
}

// abort undoes a start that failed part way, in the stop order, before
// any of it served: nothing to hand over or drain.
func (h *Host) abort() {
	h.stopOnce.Do(func() {
		if h.httpSrv != nil {
			_ = h.httpSrv.Close()
			<-h.httpServed
		} else if h.httpLis != nil {
			h.httpLis.Close()
		}
		if h.grpcLis != nil {
			h.grpcLis.Close()
		}
		if h.raftPort != nil {
			h.raftPort.Close()
		}
		if h.peers != nil {
			h.peers.Close()
		}
		if h.stopBG != nil {
			h.stopBG()
			h.bg.Wait()
		}
	})
}

// Broker is the node's data group: its state machine, Raft node and
// scheduler.
func (h *Host) Broker() *broker.Broker { return h.group }

// Groups is the node's group manager: every data group it runs.
func (h *Host) Groups() *groups.Manager { return h.groups }

// Meta is the node's meta group.
func (h *Host) Meta() *metagroup.Group { return h.meta }

// API is the node's gRPC server (and the HTTP port's handler).
func (h *Host) API() *transport.Server { return h.api }

// Registry is the node's metrics registry.
func (h *Host) Registry() *prometheus.Registry { return h.registry }

// GRPCAddr is the address the API listens on.
func (h *Host) GRPCAddr() string { return h.grpcLis.Addr().String() }

// HTTPAddr is the address the HTTP port listens on, "" when it has none.
func (h *Host) HTTPAddr() string {
	if h.httpLis == nil {
		return ""
	}
	return h.httpLis.Addr().String()
}

// TLS is the node's TLS material, nil when it runs plaintext.
func (h *Host) TLS() *tlsconfig.Source { return h.tls }

// Reload reloads the TLS material and the gossip keyring now, as SIGHUP
// does.
func (h *Host) Reload() { h.reload.reload() }

// raftTLS is what the Raft port needs of the node's TLS material (nil:
// none).
func raftTLS(src *tlsconfig.Source) *raftmux.TLS {
	if src == nil {
		return nil
	}
	return &raftmux.TLS{Server: src.NodeServerConfig("raft"), Dial: src.NodeClientConfig, PeerName: tlsconfig.PeerNodeName}
}
