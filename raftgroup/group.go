package raftgroup

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

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/raftq/raftq/internal/hclogslog"
	"github.com/raftq/raftq/raftlog"
	"github.com/raftq/raftq/raftmux"
)

// Defaults applied by Open to zero Config fields.
const (
	DefaultSnapshotThreshold  = 8192
	DefaultSnapshotInterval   = 120 * time.Second
	DefaultTrailingLogs       = 10240
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond

	// transportTimeout bounds each Raft RPC on the network transport
	// (and so how long one heartbeat can take to fail).
	transportTimeout = 10 * time.Second

	// SnapshotsRetained is how many file snapshots a group keeps in its
	// snapshots/ (the offline restore and recovery open the store too).
	SnapshotsRetained = 2
	// LogCacheSize is the number of recent log entries kept in memory in
	// front of the log store. It pins every entry's data: at 512 a node
	// held up to 512 coalesced entries (each up to 512 KiB, ~110 KB in a
	// fill of 100-message calls: 56 MB at issue 24's 1M × 1 KiB, 6% of the
	// payload; 256 MiB at worst) beside the state. What reads it are the
	// entries just appended: a follower applying what it stored, the
	// leader sending followers near the tip what they lack; 64 covers
	// those, and a follower catching up further reads the wal, which is
	// what it does past any cache.
	LogCacheSize = 64

	// maxAppendEntries is the largest batch of entries sent in one
	// AppendEntries RPC; with BatchApplyCh it also bounds one group commit.
	maxAppendEntries = 512
)

// Config configures one group on this node. Zero values mean the
// defaults documented on each field.
type Config struct {
	// Group is the group's id on the Raft port (raftmux.ValidGroupID);
	// the port's legacy group also takes connections without a
	// preamble. Required.
	Group string
	// NodeID is this node's Raft server id. Required.
	NodeID string
	// Dir holds the group's Raft state: the log and stable store
	// (raftlog: wal/ and raft.db), snapshots/, and the markers of a wipe
	// request and of corruption. The data group's is the data dir itself
	// (the layout of every release before groups). The caller holds the
	// directory's lock. Required.
	Dir string
	// LogStore chooses the log store of a Dir that holds no log yet
	// (raftlog.Open); a Dir holding one keeps its store.
	LogStore raftlog.LogStore
	// WALSegmentSize is the size of the wal's new segments (0: raft-wal's
	// default, 64 MiB, allocated up front): a group with a small log
	// takes small ones.
	WALSegmentSize int
	// Port is the node's Raft port; the group registers itself on it
	// under Group. Required.
	Port *raftmux.Mux

	// SnapshotThreshold (default 8192 entries), SnapshotInterval (default
	// 120s) and TrailingLogs (default 10240) tune log compaction
	// (autosnap.go).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// Raft timing; defaults 1s, 1s, 500ms.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration

	// GRPCAdvertise and ClientGRPCAdvertise are this node's API
	// addresses, published as the leader's while this node leads.
	GRPCAdvertise, ClientGRPCAdvertise string
	// APIAddrs returns where node id's API is as the node's membership
	// knows it (its gossip metadata): grpc for peers, client for
	// clients; ok false while it is unknown. nil: never known.
	APIAddrs func(id string) (grpc, client string, ok bool)
	// PeerChanges returns a channel closed at the next change of what
	// APIAddrs answers (the leader's metadata may have arrived). nil:
	// none.
	PeerChanges func() <-chan struct{}
	// PeersChanged, if set, is called when the leader starts or stops
	// replicating to a server (a configuration change).
	PeersChanged func()
	// Preambles reports whether the node at a Raft address understands
	// the port's preambles (raftmux.Peers). nil: none does.
	Preambles func(raft.ServerAddress) bool
	// Recorded reports whether this node belongs to a cluster it has
	// recorded (its data dir records a cluster id): then it is no
	// founder, and with no Raft state it refuses every vote
	// (novote.go). nil: it does not.
	Recorded func() bool
	// OnCorrupt is told, once, that the group's Raft state was found
	// corrupt (to advertise it); it must not block.
	OnCorrupt func(reason string)
	// OnLeadership, if set, sees every published Leadership value in
	// order (tests).
	OnLeadership func(Leadership)

	// Logger receives everything, hashicorp/raft's logs included;
	// default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if err := raftmux.ValidGroupID(c.Group); err != nil {
		return c, fmt.Errorf("raftgroup: config: group: %w", err)
	}
	if c.NodeID == "" || c.Dir == "" || c.Port == nil {
		return c, errors.New("raftgroup: config: NodeID, Dir and Port are required")
	}
	if _, err := raftlog.ParseLogStore(string(c.LogStore)); err != nil {
		return c, fmt.Errorf("raftgroup: config: %w", err)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval <= 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout <= 0 {
		c.ElectionTimeout = max(DefaultElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout <= 0 {
		c.LeaderLeaseTimeout = min(DefaultLeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.APIAddrs == nil {
		c.APIAddrs = func(string) (string, string, bool) { return "", "", false }
	}
	if c.Recorded == nil {
		c.Recorded = func() bool { return false }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClientGRPCAdvertise == "" {
		c.ClientGRPCAdvertise = c.GRPCAdvertise
	}
	return c, nil
}

// Group is one hashicorp/raft instance of this node over any raft.FSM:
// its directory and stores, its start-up restore, its snapshots, its
// leadership as published values, and the operations on it. Open it once
// per group id on the node's Raft port. Its methods are safe for
// concurrent use.
type Group struct {
	cfg Config
	log *slog.Logger

	raft  *raft.Raft
	snaps *raft.FileSnapshotStore
	// snapStats counts the snapshots written (for metrics).
	snapStats snapshotCounter
	// snapWatch takes the automatic snapshots (autosnap.go).
	snapWatch *snapshotWatch
	// startSnapBytes is the size of the newest snapshot in Dir when the
	// group opened (0 if none).
	startSnapBytes int64
	// logs is the Raft log and stable store (the wal, or bolt's raft.db).
	logs *raftlog.Opened
	// timedLogs times appends to the log (for metrics).
	timedLogs *raftlog.Timed
	// spaceLogs notices appends that fail for lack of disk space.
	spaceLogs *raftlog.Space
	trans     drainedTransport
	// raftIDs names the servers of the Raft configuration by address for
	// the port's dials.
	raftIDs  serverIDs
	hasState bool
	lead     *leadership

	// ctx lives as long as the group; Close cancels it. Every background
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
	// transferTries counts the transfers asked of raft, transferTimeouts
	// those that timed out (a test watches them).
	transferTries, transferTimeouts atomic.Int64

	// corrupt is the damage found in this group's Raft state (nil: none
	// found); corruptCh is closed when it is first found. quarantined:
	// the group was opened with it, so Raft runs on empty in-memory
	// stores with its layer of the port cut: it neither votes nor
	// serves, and waits to be removed and rebuilt (cluster/DESIGN.md,
	// "Corrupt state").
	corrupt     atomic.Pointer[raftlog.Corruption]
	corruptCh   chan struct{}
	corruptOnce sync.Once
	quarantined bool
	// raftStop is raft's shutdown, started once (a corrupt read starts
	// it early; only Close's future waits for raft to end and closes its
	// transport).
	raftStopOnce sync.Once
	raftStop     raft.Future

	startOnce, closeOnce sync.Once
	closeErr             error
}

// Open opens the group's stores (setting its state aside first if a wipe
// was requested, RequestWipe), restores its newest snapshot into fsm,
// registers the group on the port and starts Raft. Leadership is
// published, and the automatic snapshots and leader services run, once
// Start is called. fsm may also implement raft.BatchingFSM.
func Open(cfg Config, fsm raft.FSM) (_ *Group, err error) {
	if fsm == nil {
		return nil, errors.New("raftgroup: Open: nil FSM")
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	g := &Group{
		cfg:       cfg,
		log:       cfg.Logger,
		raftDone:  make(chan struct{}),
		corruptCh: make(chan struct{}),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			g.closeAll()
		}
	}()
	hcl := hclogslog.New(g.log, "")

	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("group dir: %w", err)
	}
	if err := wipeIfRequested(cfg.Dir, g.log); err != nil {
		return nil, fmt.Errorf("set raft state aside: %w", err)
	}
	g.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.Dir, SnapshotsRetained, hcl.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if metas, err := g.snaps.List(); err == nil && len(metas) > 0 {
		g.startSnapBytes = metas[0].Size // List is newest first
	}
	snapDir := filepath.Join(cfg.Dir, "snapshots")
	corrupt, err := checkAtStart(cfg.Dir, snapDir)
	if err != nil {
		return nil, err
	}
	restore := startRestore(g.log, g.snaps, snapDir, fsm)
	restoring := true
	defer func() {
		if restoring {
			restore.stop()
		}
	}()
	if corrupt == nil {
		g.logs, err = raftlog.OpenSized(cfg.Dir, cfg.LogStore, cfg.WALSegmentSize, hcl.Named("wal"))
		if errors.Is(err, wal.ErrCorrupt) {
			corrupt = &raftlog.Corruption{File: filepath.Join(cfg.Dir, raftlog.WALDir), Offset: -1, Reason: err.Error(), Err: err, At: time.Now()}
		} else if err != nil {
			return nil, fmt.Errorf("raft log: %w", err)
		}
	}
	var stable raft.StableStore
	var store raft.LogStore
	if corrupt == nil {
		g.log.Info("raft log store", "store", string(g.logs.Kind), "asked", string(cfg.LogStore))
		checked := &raftlog.Checked{LogStore: g.logs.Store, File: filepath.Join(cfg.Dir, raftlog.WALDir), OnCorrupt: g.reportCorrupt}
		if g.logs.Kind == raftlog.LogStoreBolt {
			checked.File = filepath.Join(cfg.Dir, raftlog.RaftDBFile)
			// The wal's segments were checked before it opened; bolt's
			// entries are checked one by one here.
			corrupt = checked.VerifyEntries()
		}
		store, stable = checked, g.logs.Stable
	}
	restored := false
	if corrupt == nil {
		restoring = false
		if restored = restore.wait(g.log); !restored && restore.meta != nil {
			// The newest snapshot did not restore: raft falls back to an
			// older one, which is sound only if the log still holds
			// every entry after it.
			if c := verifySnapshots(snapDir, true); c != nil && !g.setSnapshotAside(c, restore.meta, store) {
				corrupt = c
			}
		}
	}
	if corrupt != nil {
		g.quarantine(corrupt)
		mem := raft.NewInmemStore()
		store, stable = mem, mem
	}
	var diskTime func() time.Duration
	if g.logs != nil {
		diskTime = g.logs.DiskTime
	}
	// The cache sits above the chunking: LogCache.DeleteRange empties the
	// whole cache, and should do so once per compaction, not once per chunk.
	// Timing sits under the chunking, so each chunk of a compaction is its
	// own deletion between appends. The wal deletes the head of its log by
	// dropping whole segment files and one metadata commit, so chunking it
	// would only add commits. The checksums sit under them all: what is
	// checked is what the disk returned.
	g.timedLogs = raftlog.NewTimed(store, diskTime)
	var under raft.LogStore = g.timedLogs
	if g.logs != nil && g.logs.Kind == raftlog.LogStoreBolt {
		under = raftlog.NewChunked(g.timedLogs, raftlog.CompactChunk)
	}
	g.spaceLogs = raftlog.NewSpace(under, g.log, cfg.Dir)
	g.snapWatch = newSnapshotWatch(cfg.SnapshotThreshold, cfg.SnapshotInterval, g.log)
	if last, err := g.spaceLogs.LastIndex(); err == nil {
		g.snapWatch.stored.Store(last)
	}
	logs, err := raft.NewLogCache(LogCacheSize, &raftlog.Watched{LogStore: g.spaceLogs, Appended: g.snapWatch.appended})
	if err != nil {
		return nil, fmt.Errorf("log cache: %w", err)
	}

	g.hasState = true // a quarantined group has state, corrupt: nobody bootstraps from it
	if !g.quarantined {
		if g.hasState, err = raft.HasExistingState(logs, stable, g.snaps); err != nil {
			return nil, fmt.Errorf("check raft state: %w", err)
		}
	}

	// The group's layer of the Raft port: peers whose gossip says they
	// understand preambles are dialled with one.
	layer, err := cfg.Port.Register(cfg.Group, raftmux.Peers{IDOf: g.raftIDs.idOf, Preambles: cfg.Preambles})
	if err != nil {
		return nil, fmt.Errorf("raft port: %w", err)
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: transportTimeout,
		Logger:  hcl.Named("raft-net"),
	})
	g.trans = drainedTransport{NetworkTransport: nt, votes: newVoteGuard(nt.Consumer(), g.log)}

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
	var snaps raft.SnapshotStore = &writeBehindStore{FileSnapshotStore: g.snaps, dir: snapDir, chunk: writeBehindChunk, log: g.log, stats: &g.snapStats, syncs: logSyncsOf(g.logs),
		onCorrupt: g.reportCorrupt, onWritten: g.snapWatch.snapshotted}
	if g.quarantined {
		// Raft on empty stores, cut off from its peers: no configuration,
		// so it never stands for election, votes or applies, and every
		// call on it answers as a follower without a leader would. Only
		// this group's connections are cut: the node's other groups on
		// the port keep serving (and a leave and the node check still
		// go through).
		snaps = raft.NewInmemSnapshotStore()
		layer.Cut(true)
		rc.NoSnapshotRestoreOnStart = true
	} else {
		rc.NoSnapshotRestoreOnStart = restored
	}
	g.raft, err = raft.NewRaft(rc, fsm, logs, stable, snaps, g.trans)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	if checked, ok := store.(*raftlog.Checked); ok {
		checked.StopRaft = func() { g.shutdownRaft() }
	}
	if !g.quarantined {
		campaignAlone(g.raft, rc.LocalID, g.log)
	}
	g.raftIDs.raft.Store(g.raft)
	g.lead = newLeadership(cfg.NodeID, cfg.GRPCAdvertise, cfg.ClientGRPCAdvertise, g.raft, g.log, cfg.APIAddrs, cfg.OnLeadership)
	g.lead.staleAfter = failureStaleAfter(cfg.HeartbeatTimeout)
	g.lead.peersChanged = cfg.PeersChanged
	g.lead.peerChanges = cfg.PeerChanges
	// Until this runs, RPCs wait in the transport as they would for Raft.
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.trans.votes.run(g.raft, rc.LocalID, g.trans, cfg.Recorded, g.raftDone)
	}()
	return g, nil
}

// Start publishes leadership from now on, runs services during every
// established term of this node's (each until its ctx ends: the term's
// end or Close; Close waits for them while Raft still runs, so their
// in-flight proposals resolve) and starts the automatic snapshots. Only
// the first call counts.
func (g *Group) Start(services ...func(ctx context.Context)) {
	g.startOnce.Do(func() {
		g.lead.services = append(g.lead.services, services...)
		g.lead.start(g.ctx, &g.wg)
		if g.quarantined {
			return
		}
		// The newest snapshot raft started from (an older one if the
		// newest was set aside as damaged).
		if metas, err := g.snaps.List(); err == nil && len(metas) > 0 {
			g.snapWatch.found(metas[0].Index)
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.snapWatch.run(g.ctx, g.raft)
		}()
	})
}

// Close stops the leader services (while Raft still runs), shuts Raft
// down, waits for every goroutine and closes the stores. The group's
// layer of the port is closed by Raft's transport; the port stays (its
// owner closes it). Idempotent.
func (g *Group) Close() error {
	g.closeOnce.Do(func() { g.closeErr = g.closeAll() })
	return g.closeErr
}

// closeAll stops everything Open may have started, in order, and waits
// for every goroutine. Safe on a partially opened group.
func (g *Group) closeAll() error {
	var errs []error
	g.cancel() // ends the loops and the leader term
	if g.lead != nil && g.lead.loopDone != nil {
		// The leader services stop (and are waited for) while Raft
		// still runs, so their in-flight proposals resolve.
		<-g.lead.loopDone
	}
	if g.raft != nil {
		if err := g.shutdownRaft().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft: %w", err))
		}
		close(g.raftDone)
		g.closeReads()
		g.lead.stopObserving()
	} else if g.trans.NetworkTransport != nil {
		if err := g.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft transport: %w", err))
		}
	}
	g.wg.Wait()
	if g.logs != nil && g.logs.Close != nil {
		if err := g.logs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft log: %w", err))
		}
	}
	if g.lead != nil {
		g.lead.close() // the final value: RoleShutdown
	}
	return errors.Join(errs...)
}

// shutdownRaft starts raft's shutdown, once, and returns its future.
func (g *Group) shutdownRaft() raft.Future {
	g.raftStopOnce.Do(func() { g.raftStop = g.raft.Shutdown() })
	return g.raftStop
}

// HasState reports whether the group had Raft state (a log entry, a
// snapshot or a term) when it opened: without, it waits to be
// bootstrapped or to be sent the leader's log. A quarantined group
// counts as having state.
func (g *Group) HasState() bool { return g.hasState }

// Raft is the group's hashicorp/raft instance, for the node's
// configuration changes (the reconciler's AddVoter, AddNonvoter and
// RemoveServer) and reads of its configuration. The group owns it: the
// caller neither applies through it nor shuts it down.
func (g *Group) Raft() *raft.Raft { return g.raft }

// Bootstrap founds the group with conf (every founder calls it with the
// same configuration) and, if conf has this node as its only voter,
// stands for election at once (alone.go). raft.ErrCantBootstrap: the
// group has state (a leader's log arrived meanwhile).
func (g *Group) Bootstrap(conf raft.Configuration) error {
	if err := g.raft.BootstrapCluster(conf).Error(); err != nil {
		return err
	}
	campaignAlone(g.raft, raft.ServerID(g.cfg.NodeID), g.log)
	return nil
}

// RemoveServer removes server id from the configuration at index
// prevIndex (0: whatever it is), waiting within ctx (leader only).
func (g *Group) RemoveServer(ctx context.Context, id string, prevIndex uint64) error {
	return g.await(ctx, "remove node "+id, g.raft.RemoveServer(raft.ServerID(id), prevIndex, enqueueTimeout(ctx)))
}

// Stats is what the group's Raft reports of itself now, for status.
type Stats struct {
	State                           raft.RaftState
	Term, CommitIndex, AppliedIndex uint64
	// LastContact is when a follower last heard from the leader.
	LastContact time.Time
	// FailedHeartbeats, on the leader: the peers failing heartbeats,
	// since when.
	FailedHeartbeats map[string]time.Time
}

// Stats reports the group's Raft state, term and indexes.
func (g *Group) Stats() Stats {
	return Stats{State: g.raft.State(), Term: g.raft.CurrentTerm(), CommitIndex: g.raft.CommitIndex(), AppliedIndex: g.raft.AppliedIndex(),
		LastContact: g.raft.LastContact(), FailedHeartbeats: g.lead.failedHeartbeats()}
}

// Configured is what reads a raft instance's configuration (*raft.Raft).
type Configured interface {
	GetConfiguration() raft.ConfigurationFuture
}

// LatestServers returns raft's latest configuration.
func LatestServers(r Configured) ([]raft.Server, error) {
	_, servers, err := LatestConfig(r)
	return servers, err
}

// LatestConfig returns raft's latest configuration and its index.
func LatestConfig(r Configured) (uint64, []raft.Server, error) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, nil, wrapRaftErr("get configuration", err)
	}
	return f.Index(), f.Configuration().Servers, nil
}

// serverIDs names the servers of a group's latest Raft configuration by
// address, once its Raft exists (raft's StreamLayer.Dial is given only
// the address).
type serverIDs struct{ raft atomic.Pointer[raft.Raft] }

// idOf names the one server at addr in the latest Raft configuration.
func (s *serverIDs) idOf(addr raft.ServerAddress) (string, bool) {
	r := s.raft.Load()
	if r == nil {
		return "", false
	}
	servers, err := LatestServers(r)
	if err != nil {
		return "", false
	}
	id, n := "", 0
	for _, sv := range servers {
		if sv.Address == addr {
			id, n = string(sv.ID), n+1
		}
	}
	return id, n == 1
}
