package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"os"
	"path/filepath"

	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/raftlog"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/raftq/raftq/raftmux"
)

// LeaderService runs only while this node is leader: it is started after a
// Barrier succeeds on gaining leadership, and its ctx is cancelled on losing
// leadership or on shutdown. RunLeader must return when ctx is done; the
// node waits for it before it starts another term or shuts down.
type LeaderService interface {
	RunLeader(ctx context.Context)
}

// LeaderInfo names the current leader. ID is empty if none is known;
// GRPCAddr (where peers reach it) and ClientGRPCAddr (where clients are
// sent) are empty if its gossip metadata is not (yet) known.
type LeaderInfo struct {
	ID             string
	RaftAddr       string
	GRPCAddr       string
	ClientGRPCAddr string
}

// Node is one member of a raftq cluster. It owns Raft and its stores and
// composes the parts that run around it: membership (memberlist), the
// bootstrapper, the reconciler, leadership and the leave protocol. Its
// methods are safe for concurrent use.
type Node struct {
	cfg Config
	log *slog.Logger

	// transferTries counts the transfers asked of raft (a test watches it).
	transferTries atomic.Int64

	raft  *raft.Raft
	snaps *raft.FileSnapshotStore
	// snapStats counts the snapshots written (for metrics).
	snapStats snapshotCounter
	// snapWatch takes the automatic snapshots (autosnap.go).
	snapWatch *snapshotWatch
	// startSnapBytes is the size of the newest snapshot in the data dir
	// when the node started (0 if none).
	startSnapBytes int64
	// logs is the Raft log and stable store (the wal, or bolt's raft.db).
	logs *raftlog.Opened
	// timedLogs times appends to the log (for metrics).
	timedLogs *raftlog.Timed
	// spaceLogs notices appends that fail for lack of disk space.
	spaceLogs *raftlog.Space
	trans     drainedTransport
	// mux is the Raft port (raftmux), the host's: trans runs on the data
	// group's layer of it, and the host closes it after the node. raftIDs names the servers of the Raft configuration by
	// address for the layer's dials.
	mux      *raftmux.Mux
	raftIDs  serverIDs
	raftAddr string // advertised Raft address

	ms    *membership
	id    *identity
	lead  *leadership
	boot  *bootstrapper
	rec   *reconciler
	leave *leaveProtocol

	// ctx lives as long as the node; Shutdown cancels it. Every background
	// goroutine is counted in wg.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// raftDone is closed once Raft has shut down.
	raftDone chan struct{}
	// reads coalesces linearizable reads' leadership confirmations
	// (readconfirm.go).
	reads readConfirms
	// verifies counts VerifyLeader calls that went on to confirm.
	verifies atomic.Int64
	// unlock releases the data dir's lock (closeAll, last).
	unlock func()

	// corrupt is the damage found in this node's Raft state (nil: none
	// found); corruptCh is closed when it is first found. quarantined:
	// the node was started with it, so Raft runs on empty in-memory
	// stores with its network cut: it neither votes nor serves, and waits
	// to be removed and rebuilt (cluster/DESIGN.md, "Corrupt state").
	corrupt     atomic.Pointer[raftlog.Corruption]
	corruptCh   chan struct{}
	corruptOnce sync.Once
	quarantined bool
	// raftStop is raft's shutdown, started once (a corrupt read starts
	// it early; only the first Shutdown's future waits for raft to end
	// and closes its transport).
	raftStopOnce sync.Once
	raftStop     raft.Future

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
		cfg:       cfg,
		log:       cfg.Logger.With(slog.String("node", cfg.NodeID)),
		shutDone:  make(chan struct{}),
		raftDone:  make(chan struct{}),
		corruptCh: make(chan struct{}),
		mux:       port,
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.closeAll()
			err = fmt.Errorf("cluster: start node %q: %w", cfg.NodeID, err)
		}
	}()
	hcl := newHCLogger(n.log, "")

	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if n.unlock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := wipeIfRequested(cfg.DataDir, n.log); err != nil {
		return nil, fmt.Errorf("set raft state aside: %w", err)
	}
	if err := claimDataDir(cfg.DataDir, cfg.NodeID); err != nil {
		return nil, err
	}
	if n.id, err = loadIdentity(cfg.DataDir, n.log); err != nil {
		return nil, err
	}
	n.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, snapshotsRetained, hcl.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if metas, err := n.snaps.List(); err == nil && len(metas) > 0 {
		n.startSnapBytes = metas[0].Size // List is newest first
	}
	snapDir := filepath.Join(cfg.DataDir, "snapshots")
	corrupt, err := checkAtStart(cfg.DataDir, snapDir)
	if err != nil {
		return nil, err
	}
	restore := startRestore(n.log, n.snaps, snapDir, fsm)
	restoring := true
	defer func() {
		if restoring {
			restore.stop()
		}
	}()
	if corrupt == nil {
		n.logs, err = raftlog.Open(cfg.DataDir, cfg.LogStore, hcl.Named("wal"))
		if errors.Is(err, wal.ErrCorrupt) {
			corrupt = &raftlog.Corruption{File: filepath.Join(cfg.DataDir, raftlog.WALDir), Offset: -1, Reason: err.Error(), Err: err, At: time.Now()}
		} else if err != nil {
			return nil, fmt.Errorf("raft log: %w", err)
		}
	}
	var stable raft.StableStore
	var store raft.LogStore
	if corrupt == nil {
		n.log.Info("raft log store", "store", string(n.logs.Kind), "asked", string(cfg.LogStore))
		checked := &raftlog.Checked{LogStore: n.logs.Store, File: filepath.Join(cfg.DataDir, raftlog.WALDir), OnCorrupt: n.reportCorrupt}
		if n.logs.Kind == raftlog.LogStoreBolt {
			checked.File = filepath.Join(cfg.DataDir, raftlog.RaftDBFile)
			// The wal's segments were checked before it opened; bolt's
			// entries are checked one by one here.
			corrupt = checked.VerifyEntries()
		}
		store, stable = checked, n.logs.Stable
	}
	restored := false
	if corrupt == nil {
		restoring = false
		if restored = restore.wait(n.log); !restored && restore.meta != nil {
			// The newest snapshot did not restore: raft falls back to an
			// older one, which is sound only if the log still holds
			// every entry after it.
			if c := verifySnapshots(snapDir, true); c != nil && !n.setSnapshotAside(c, restore.meta, store) {
				corrupt = c
			}
		}
	}
	if corrupt != nil {
		n.quarantine(corrupt)
		mem := raft.NewInmemStore()
		store, stable = mem, mem
	}
	var diskTime func() time.Duration
	if n.logs != nil {
		diskTime = n.logs.DiskTime
	}
	// The cache sits above the chunking: LogCache.DeleteRange empties the
	// whole cache, and should do so once per compaction, not once per chunk.
	// Timing sits under the chunking, so each chunk of a compaction is its
	// own deletion between appends. The wal deletes the head of its log by
	// dropping whole segment files and one metadata commit, so chunking it
	// would only add commits. The checksums sit under them all: what is
	// checked is what the disk returned.
	n.timedLogs = raftlog.NewTimed(store, diskTime)
	var under raft.LogStore = n.timedLogs
	if n.logs != nil && n.logs.Kind == raftlog.LogStoreBolt {
		under = raftlog.NewChunked(n.timedLogs, raftlog.CompactChunk)
	}
	n.spaceLogs = raftlog.NewSpace(under, n.log, cfg.DataDir)
	n.snapWatch = newSnapshotWatch(cfg.SnapshotThreshold, cfg.SnapshotInterval, n.log)
	if last, err := n.spaceLogs.LastIndex(); err == nil {
		n.snapWatch.stored.Store(last)
	}
	logs, err := raft.NewLogCache(logCacheSize, &raftlog.Watched{LogStore: n.spaceLogs, Appended: n.snapWatch.appended})
	if err != nil {
		return nil, fmt.Errorf("log cache: %w", err)
	}

	n.raftAddr = port.Addr().String()

	hasState := true // a quarantined node has state, corrupt: nobody bootstraps from it
	if !n.quarantined {
		if hasState, err = raft.HasExistingState(logs, stable, n.snaps); err != nil {
			return nil, fmt.Errorf("check raft state: %w", err)
		}
	}
	// Checks the metadata fits before memberlist would refuse it.
	n.ms, err = newMembership(cfg, n.log, n.raftAddr, hasState, port.Secure())
	if err != nil {
		return nil, err
	}
	n.ms.id = n.id
	n.ms.corrupt.Store(n.corrupt.Load() != nil)
	n.id.published = n.ms.publishMeta

	// The Raft port (raftmux) carries the data group; peers whose gossip
	// says they understand preambles are dialled with one.
	preambles := n.ms.preamblesAt
	if cfg.noMux {
		preambles = nil
	}
	layer, err := port.Register(dataGroup, raftmux.Peers{IDOf: n.raftIDs.idOf, Preambles: preambles})
	if err != nil {
		return nil, fmt.Errorf("raft port: %w", err)
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hcl.Named("raft-net"),
	})
	n.trans = drainedTransport{NetworkTransport: nt, votes: newVoteGuard(nt.Consumer(), n.log)}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hcl.Named("raft")
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.MaxAppendEntries = maxAppendEntries
	rc.BatchApplyCh = true
	// snapWatch decides when to snapshot (autosnap.go): raft's own timer
	// never finds its threshold reached.
	rc.SnapshotThreshold = raftSnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	// A removed server stays up so that it can be added back (it is still
	// alive in gossip); with true it would stop Raft for good.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}
	var snaps raft.SnapshotStore = &writeBehindStore{FileSnapshotStore: n.snaps, dir: snapDir, chunk: writeBehindChunk, log: n.log, stats: &n.snapStats,
		onCorrupt: n.reportCorrupt, onWritten: n.snapWatch.snapshotted}
	if n.quarantined {
		// Raft on empty stores, cut off from its peers: no configuration,
		// so it never stands for election, votes or applies, and every
		// call on it answers as a follower without a leader would.
		snaps = raft.NewInmemSnapshotStore()
		n.mux.Cut(true)
		rc.NoSnapshotRestoreOnStart = true
	} else {
		rc.NoSnapshotRestoreOnStart = restored
	}
	n.raft, err = raft.NewRaft(rc, fsm, logs, stable, snaps, n.trans)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	if checked, ok := store.(*raftlog.Checked); ok {
		checked.StopRaft = func() { n.shutdownRaft() }
	}
	if !n.quarantined {
		campaignAlone(n.raft, rc.LocalID, n.log)
	}
	n.raftIDs.raft.Store(n.raft)
	n.lead = newLeadership(cfg.NodeID, cfg.GRPCAdvertise, cfg.ClientGRPCAdvertise, n.raft, n.log, n.ms.meta, cfg.onLeadership)
	n.boot = newBootstrapper(cfg, n.log, n.raft, n.ms, n.id)
	// Until this runs, RPCs wait in the transport as they would for Raft.
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.trans.votes.run(n.raft, rc.LocalID, n.trans, n.id.recorded, n.raftDone)
	}()
	n.rec = newReconciler(cfg, n.log, n.raft, n.ms, n.id)
	n.leave = &leaveProtocol{self: cfg.NodeID, log: n.log, r: n.raft, ms: n.ms, lead: n.lead,
		transfer: func(ctx context.Context) (string, error) { return n.TransferLeadership(ctx, "") }}
	if port.Secure() {
		// The leader adds a member only once it has shown its node
		// certificate; a leave counts only when announced over mTLS.
		n.rec.checkNode = n.mux.CheckNode
		n.leave.announce = n.mux.SendLeave
		n.mux.OnLeave(n.ms.authenticatedLeave)
	}
	if leader != nil {
		n.lead.services = append(n.lead.services, func(ctx context.Context) {
			n.log.Info("starting leader service")
			leader.RunLeader(ctx)
			n.log.Info("leader service stopped")
		})
	}
	n.lead.services = append(n.lead.services, n.rec.run)
	// A configuration change seen by the leader is a membership change
	// for VoterVersions.
	n.lead.peersChanged = n.ms.notifyChanged
	n.ms.onChange = []func(){
		func() { notify(n.rec.wake) },
		func() { notify(n.boot.wake) },
		n.lead.refresh, // the leader's metadata may have arrived or changed
	}
	if err := n.ms.start(ctx, hcl); err != nil {
		return nil, err
	}

	n.lead.start(n.ctx, &n.wg)
	joined := make(chan struct{})
	n.wg.Add(1)
	go n.ms.joinLoop(n.ctx, &n.wg, joined)
	n.wg.Add(1)
	go n.ms.reconnectLoop(n.ctx, &n.wg)
	if !hasState {
		n.wg.Add(1)
		go n.boot.run(n.ctx, &n.wg, joined)
	}
	n.wg.Add(1)
	go n.identityLoop(n.ctx)
	if !n.quarantined {
		// The newest snapshot raft started from (an older one if the
		// newest was set aside as damaged).
		if metas, err := n.snaps.List(); err == nil && len(metas) > 0 {
			n.snapWatch.found(metas[0].Index)
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.snapWatch.run(n.ctx, n.raft)
		}()
	}
	n.log.Info("node started", "raft", n.raftAddr, "gossip", n.ms.addr, "grpc", cfg.GRPCAdvertise,
		"existing_state", hasState, "bootstrap_expect", cfg.BootstrapExpect, "join", cfg.Join, "cluster_id", n.id.get())
	return n, nil
}

// SetGossipKeys replaces the gossip keyring of a node started with
// Config.GossipKeys: keys[0] encrypts, every key is accepted, others are
// dropped. Rotating a key takes three rounds over every node: add the new
// key second, make it first, drop the old one.
func (n *Node) SetGossipKeys(keys [][]byte) error {
	if err := n.ms.setKeys(keys); err != nil {
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
func (n *Node) GossipAddr() string { return n.ms.addr }

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
		servers, err := latestServers(n.raft)
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
	if err := n.ms.shutdown(); err != nil {
		n.log.Warn("memberlist shutdown", "err", err)
	}
	n.shutErr = n.closeAll()
	n.log.Info("node stopped")
	return n.shutErr
}

// closeAll stops everything New may have started, in order, and waits for
// every goroutine. Safe on a partially constructed node.
func (n *Node) closeAll() error {
	var errs []error
	n.cancel() // ends the loops and the leader term
	if n.lead != nil && n.lead.loopDone != nil {
		// The leader service stops (and is waited for) while Raft still
		// runs, so its in-flight proposals resolve.
		<-n.lead.loopDone
	}
	if err := n.ms.shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("memberlist: %w", err))
	}
	if n.raft != nil {
		if err := n.shutdownRaft().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft: %w", err))
		}
		close(n.raftDone)
		n.closeReads()
		n.lead.stopObserving()
	} else if n.trans.NetworkTransport != nil {
		if err := n.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft transport: %w", err))
		}
	}
	n.wg.Wait()
	if n.logs != nil && n.logs.Close != nil {
		if err := n.logs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft log: %w", err))
		}
	}
	if n.lead != nil {
		n.lead.close() // the final value: RoleShutdown
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

// shutdownRaft starts raft's shutdown, once, and returns its future.
func (n *Node) shutdownRaft() raft.Future {
	n.raftStopOnce.Do(func() { n.raftStop = n.raft.Shutdown() })
	return n.raftStop
}
