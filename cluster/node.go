package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/internal/hclogslog"
	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// LeaderService runs only while this node is leader: it is started after a
// Barrier succeeds on gaining leadership, and its ctx is cancelled on losing
// leadership or on shutdown. RunLeader must return when ctx is done; the
// node waits for it before it starts another term or shuts down.
type LeaderService interface {
	RunLeader(ctx context.Context)
}

// Node is one member of a raftq cluster: its membership (memberlist), the
// data group's Raft runtime (raftgroup.Group, Group) and what keeps that
// group's configuration in step with gossip: the bootstrapper, the
// reconciler and the leave protocol. Its methods are safe for concurrent
// use.
type Node struct {
	cfg Config
	log *slog.Logger

	// g is the data group's Raft runtime; r is its raft instance, for
	// the configuration changes this package makes.
	g *raftgroup.Group
	r groupRaft
	// mux is the Raft port (raftmux), the host's: the data group
	// registered on it, and the host closes it after the node.
	mux      *raftmux.Mux
	raftAddr string // advertised Raft address

	ms    *membership.Membership
	id    *identity
	boot  *bootstrapper
	rec   *reconciler
	leave *leaveProtocol

	// ctx lives as long as the node; Shutdown cancels it. Every background
	// goroutine of the node's own is counted in wg.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// unlock releases the data dir's lock (closeAll, last).
	unlock func()

	shutMu      sync.Mutex
	shutStarted bool
	shutDone    chan struct{}
	shutErr     error
}

// New opens the node's stores, starts Raft and gossip, joins the seeds and
// bootstraps when the configuration calls for it. ctx bounds only the
// start-up (address resolution); the node runs until Shutdown.
//
// port is the node's Raft port, which the caller (the host) built and
// closes after Shutdown: the data group registers itself on it, and its
// advertised address is the node's Raft address.
//
// fsm is the replicated state machine (it may also implement
// raft.BatchingFSM); leader may be nil.
func New(ctx context.Context, cfg Config, port *raftmux.Mux, fsm raft.FSM, leader LeaderService) (_ *Node, err error) {
	if fsm == nil {
		return nil, errors.New("cluster: New: nil FSM")
	}
	if port == nil {
		return nil, errors.New("cluster: New: nil Raft port")
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With(slog.String("node", cfg.NodeID)),
		shutDone: make(chan struct{}),
		mux:      port,
		raftAddr: port.Addr().String(),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.closeAll()
			err = fmt.Errorf("cluster: start node %q: %w", cfg.NodeID, err)
		}
	}()
	hcl := hclogslog.New(n.log, "")

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if n.unlock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := claimDataDir(cfg.DataDir, cfg.NodeID); err != nil {
		return nil, err
	}
	if n.id, err = loadIdentity(cfg.DataDir, n.log); err != nil {
		return nil, err
	}
	// Checks the metadata fits before memberlist would refuse it; the
	// data group's state is published once the group has opened.
	n.ms, err = membership.New(cfg.membership(n.id.get), n.log, n.raftAddr, false, port.Secure())
	if err != nil {
		return nil, err
	}

	// The data group: its Raft state is the data dir's (the layout of
	// every release before groups), and it is the Raft port's legacy
	// group. Peers whose gossip says they understand preambles are
	// dialled with one.
	preambles := n.ms.PreamblesAt
	if cfg.noMux {
		preambles = nil
	}
	n.g, err = raftgroup.Open(raftgroup.Config{
		Group: dataGroup, NodeID: cfg.NodeID, Dir: cfg.DataDir, LogStore: cfg.LogStore, Port: port,
		SnapshotThreshold: cfg.SnapshotThreshold, SnapshotInterval: cfg.SnapshotInterval, TrailingLogs: cfg.TrailingLogs,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
		GRPCAdvertise: cfg.GRPCAdvertise, ClientGRPCAdvertise: cfg.ClientGRPCAdvertise,
		APIAddrs:    n.ms.APIAddrs,
		PeerChanges: n.ms.Changes,
		// A configuration change seen by the leader is a membership
		// change for VoterVersions.
		PeersChanged: n.ms.NotifyChanged,
		Preambles:    preambles,
		Recorded:     n.id.recorded,
		OnCorrupt:    n.ms.SetCorrupt,
		OnLeadership: cfg.onLeadership,
		Logger:       n.log,
	}, fsm)
	if err != nil {
		return nil, err
	}
	n.r = n.g.Raft()
	hasState := n.g.HasState()
	n.ms.SetHasState(hasState)
	if c := n.g.Corrupt(); c != nil {
		n.ms.SetCorrupt(c.Error()) // published when gossip starts
	}
	n.id.published = n.ms.Publish

	n.boot = newBootstrapper(cfg, n.log, n.g, n.ms, n.id)
	n.rec = newReconciler(cfg, n.log, n.r, n.ms, n.id)
	n.leave = &leaveProtocol{self: cfg.NodeID, log: n.log, r: n.r, ms: n.ms, g: n.g,
		transfer: func(ctx context.Context) (string, error) { return n.g.TransferLeadership(ctx, "") }}
	if port.Secure() {
		// The leader adds a member only once it has shown its node
		// certificate; a leave counts only when announced over mTLS.
		n.rec.checkNode = port.CheckNode
		n.leave.announce = port.SendLeave
		port.OnLeave(n.ms.AuthenticatedLeave)
	}
	var services []func(ctx context.Context)
	if leader != nil {
		services = append(services, func(ctx context.Context) {
			n.log.Info("starting leader service")
			leader.RunLeader(ctx)
			n.log.Info("leader service stopped")
		})
	}
	services = append(services, n.rec.run)
	if err := n.ms.Start(ctx, hcl, func() { notify(n.rec.wake) }, func() { notify(n.boot.wake) }); err != nil {
		return nil, err
	}

	n.g.Start(services...)
	joined := make(chan struct{})
	n.wg.Add(1)
	go n.ms.JoinLoop(n.ctx, &n.wg, joined)
	n.wg.Add(1)
	go n.ms.ReconnectLoop(n.ctx, &n.wg)
	if !hasState {
		n.wg.Add(1)
		go n.boot.run(n.ctx, &n.wg, joined)
	}
	n.wg.Add(1)
	go n.identityLoop(n.ctx)
	n.log.Info("node started", "raft", n.raftAddr, "gossip", n.ms.Addr(), "grpc", cfg.GRPCAdvertise,
		"existing_state", hasState, "bootstrap_expect", cfg.BootstrapExpect, "join", cfg.Join, "cluster_id", n.id.get())
	return n, nil
}

// SetGossipKeys replaces the gossip keyring of a node started with
// Config.GossipKeys: keys[0] encrypts, every key is accepted, others are
// dropped. Rotating a key takes three rounds over every node: add the new
// key second, make it first, drop the old one.
func (n *Node) SetGossipKeys(keys [][]byte) error {
	if err := n.ms.SetKeys(keys); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.log.Info("gossip keyring replaced", "keys", len(keys))
	return nil
}

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// ClientGRPCAddr returns the gRPC address clients are sent to (the
// advertised one, or the address peers use when there is none).
func (n *Node) ClientGRPCAddr() string { return n.cfg.ClientGRPCAdvertise }

// RaftAddr returns the advertised Raft address.
func (n *Node) RaftAddr() string { return n.raftAddr }

// GossipAddr returns the advertised gossip address (what others --join).
func (n *Node) GossipAddr() string { return n.ms.Addr() }

// Shutdown stops the node and keeps it in the cluster: a leader first
// hands leadership over (bounded by ctx), then gossip stops without a
// leave, so the others see a failed member, which stays a voter (removed
// only after DeadNodeTimeout, and never below BootstrapExpect) and takes
// its place again when it restarts on the same data dir. Then the leader
// service stops, Raft shuts down and the stores close. To take the node
// out of the cluster, Leave first. Shutdown is idempotent; later calls wait
// for the first to finish. If ctx ends early the hand-over is cut short,
// but the node still stops.
func (n *Node) Shutdown(ctx context.Context) error {
	return n.stop(ctx, true)
}

// Leave takes this node out of the cluster while it keeps running: a
// leader hands leadership over, the node announces its leave in gossip,
// and Leave waits (bounded by ctx) until the leader has removed it from
// the Raft configuration. The node should be shut down next: it is not
// added back until it restarts. A voter whose leave would leave fewer
// voters than BootstrapExpect is refused with ErrBelowExpect (nothing
// done) unless force is set, as RemoveNode is. Once the leave has been
// announced, later calls return the first one's result.
func (n *Node) Leave(ctx context.Context, force bool) error {
	if !force && !n.leave.hasLeft() {
		servers, err := raftgroup.LatestServers(n.r)
		if err != nil {
			return err
		}
		voters, self := 0, false
		for _, s := range servers {
			if s.Suffrage == raft.Voter {
				voters++
				self = self || string(s.ID) == n.cfg.NodeID
			}
		}
		if self && voters-1 < n.cfg.BootstrapExpect {
			return fmt.Errorf("%w: %s leaving would leave %d voters, bootstrap-expect is %d",
				ErrBelowExpect, n.cfg.NodeID, voters-1, n.cfg.BootstrapExpect)
		}
	}
	n.log.Info("leaving the cluster on request", "force", force)
	return n.leave.run(ctx)
}

// stop shuts the node down; graceful=false simulates a crash (no leadership
// transfer).
func (n *Node) stop(ctx context.Context, graceful bool) error {
	n.shutMu.Lock()
	if n.shutStarted {
		n.shutMu.Unlock()
		select {
		case <-n.shutDone:
			return n.shutErr
		case <-ctx.Done():
			return fmt.Errorf("cluster: shutdown: %w", ctx.Err())
		}
	}
	n.shutStarted = true
	n.shutMu.Unlock()
	defer close(n.shutDone)

	n.log.Info("node shutting down", "graceful", graceful, "left", n.leave.hasLeft())
	if graceful {
		n.leave.handOver(ctx, "stopping")
	}
	if err := n.ms.Shutdown(); err != nil {
		n.log.Warn("memberlist shutdown", "err", err)
	}
	n.shutErr = n.closeAll()
	n.log.Info("node stopped")
	return n.shutErr
}

// closeAll stops everything New may have started, in order, and waits for
// every goroutine: the node's loops, then the data group (its leader
// services stop while Raft still runs, then Raft, then its stores).
// Safe on a partially constructed node.
func (n *Node) closeAll() error {
	var errs []error
	n.cancel() // ends the node's loops
	if err := n.ms.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("memberlist: %w", err))
	}
	n.wg.Wait()
	if n.g != nil {
		if err := n.g.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.unlock != nil {
		n.unlock()
		n.unlock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: shutdown: %w", err)
	}
	return nil
}

// Group is the data group's Raft runtime: Apply, Barrier, leadership,
// snapshots and the rest of what one group does on this node.
func (n *Node) Group() *raftgroup.Group { return n.g }

// Membership is the node's gossip membership: what every group of the
// node learns of the others' addresses and abilities from (the meta group
// opens over it too).
func (n *Node) Membership() *membership.Membership { return n.ms }
