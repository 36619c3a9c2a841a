package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/diskguard"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/metrics"
	"github.com/raftq/raftq/peers"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/scheduler"
)

// Config builds one node.
type Config struct {
	// Meta is the meta group's local state (the host's meta.FSM), whose
	// settings the data leader follows from the handover; nil: none
	// (tests of the data group alone).
	Meta MetaState
	// Cluster configures Raft, membership and the data dir. Its NodeID is
	// the node's id; its Logger is set from Logger.
	Cluster cluster.Config
	// RaftPort is the node's Raft port (the host builds and closes it);
	// the data group registers itself on it. Required for the legacy
	// group (Runtime nil).
	RaftPort *raftmux.Mux
	// Group is the group's id: "" or GroupID for the legacy data group,
	// else a group the meta group placed (issue 22).
	Group string
	// Runtime opens the group's Raft runtime over its state machine, and
	// with it what the group reads of membership; nil: the legacy data
	// group's cluster node (cluster.New from Cluster on RaftPort:
	// gossip, bootstrap-expect, the reconciler, leave). A placed group's
	// is a cluster.Placed, opened by its caller (package groups).
	Runtime func(ctx context.Context, f raft.FSM) (Runtime, error)
	// LeaseGrace: after a failover, how long before leases granted by the
	// old leader may expire (0 = the scheduler's default).
	LeaseGrace time.Duration
	// MaxQueuedBytes is the node-wide admission limit on payload bytes
	// held; 0 = unlimited.
	MaxQueuedBytes int64
	// MaxPendingBytes bounds the client writes this node holds in front of
	// Raft (queued and in flight); past it writes fail with ErrOverloaded.
	// 0 = DefaultMaxPendingBytes.
	MaxPendingBytes int64
	// MinFreeDisk is the free space this node keeps on its data dir's
	// file system, besides room for its next snapshot and wal segment; below it the
	// leader refuses writes that add data (disk.go). 0 =
	// diskguard.DefaultMinFree.
	MinFreeDisk uint64
	// DiskCheckInterval is how often free space is measured and
	// published to the other nodes (0 = 1s); the leader also measures
	// before each write that adds data.
	DiskCheckInterval time.Duration
	// DrainInterval is how often each queue's depth is sampled for its
	// drain-time estimate (0 = 5s).
	DrainInterval time.Duration
	// Audit tunes every node's counter audit (audit.go).
	Audit AuditConfig
	// ReplicaCheckInterval is how often the leader checks that every
	// replica's state digest agrees (replica.go); 0 =
	// DefaultReplicaCheckInterval, negative = never.
	ReplicaCheckInterval time.Duration
	// CarryGrants lets ack entries carry the grants of the credit they
	// free (scheduler.Config.CarryGrants); off by default.
	CarryGrants bool
	// Clock stamps every command and drives the scheduler; nil = the wall
	// clock. Tests replace it.
	Clock Clock
	// Peers reaches the other nodes: a follower's counter audit asks the
	// leader through it to commit its recounts (audit.go), and the
	// leader's replica check asks every node for its digest (replica.go).
	// nil: a follower reports drift in its log only, and the leader
	// checks no replicas. The host owns and closes it.
	Peers *peers.Pool
	// Logger receives every component's logs (each with its component
	// attribute added once, here); nil = slog.Default().
	Logger *slog.Logger
}

// GroupID names the one data group a node runs (issue 21): the group
// the operator calls' group field may name, the group a backup says it
// holds, and the group the Raft port's legacy connections belong to.
const GroupID = "data"

// Runtime is a data group's Raft runtime and what the group reads of the
// node's membership: the legacy group's *cluster.Node, a placed group's
// *cluster.Placed.
type Runtime interface {
	// Group is the Raft runtime (Apply, leadership, snapshots).
	Group() *raftgroup.Group
	// VoterVersions and VoterDisks are what the group's servers
	// advertise in gossip (the version raiser, the disk guard).
	VoterVersions() cluster.VoterVersions
	VoterDisks() cluster.VoterDisks
	// SetDiskLow publishes this node's disk state (the legacy group
	// only: one flag per node).
	SetDiskLow(low bool)
	// Status is the group's servers as this node sees them (the replica
	// check, status).
	Status() cluster.Status
	// RemoveNode removes a server (the leader's replica repair).
	RemoveNode(ctx context.Context, id string, force bool) error
	// Leave takes this node out of the group (the legacy group: the
	// cluster); Shutdown stops it, handing leadership over first.
	Leave(ctx context.Context, force bool) error
	Shutdown(ctx context.Context) error
}

// Coalescing limits: entries in flight before requests start to merge, and
// the most messages/bytes merged into one entry (one request always fits).
const (
	coalesceInFlight = 16
	coalesceItems    = 512
	coalesceBytes    = 512 << 10
)

// Broker is one data group on this node: the replicated state, its Raft node, the leader's
// scheduler and the write coalescers, built in New in that order. Its
// methods are safe for concurrent use.
type Broker struct {
	id    string
	log   *slog.Logger
	clock Clock
	cfg   Config

	state     *fsm.FSM
	reads     fsm.Reader       // state's read side
	versions  versionGate      // refuses what the cluster version does not apply yet
	proposals *fsm.Proposals   // what this node proposes, so its FSM need not decode it
	groupID   string           // the group's id (GroupID for the legacy group)
	rt        Runtime          // the Raft runtime and membership view
	node      *cluster.Node    // rt, for the legacy group; nil for a placed one
	group     *raftgroup.Group // rt's Raft runtime
	sched     *scheduler.Scheduler
	feed      *changeFeed

	gate     *pendingGate
	enqueues *coalescer[enqueueReq]
	acks     *coalescer[ackReq]

	// handBacks holds and sends what a lost term never sent (handback.go).
	handBacks *handBackSender

	// disk measures the data dir's free space and admits the writes
	// that add data (disk.go); its loop publishes it in gossip until
	// Close.
	disk *diskWatch

	leader *leaderWork
	// audit is the counter audit, a node duty (audit.go); raiser the
	// cluster-version raiser, a leader duty (version.go).
	audit      *counterAudit
	raiser     *versionRaiser
	metaFollow *metaFollower
	replicas   *replicaCheck // the replica check, a leader duty (replica.go)
	// diverged is set once this node learns its state differs from the
	// replicas' (replica.go); repairs is what the leader knows of the
	// nodes it repairs.
	diverged  atomic.Pointer[Divergence]
	repairs   *repairs
	leases    *metrics.Leases // the leader's delivery histograms
	drain     *metrics.Drain  // per-queue drain-time estimates
	stopDrain context.CancelFunc
	drainDone chan struct{}
	closeOnce sync.Once
}

// New builds and starts a node: the state machine restores from the data
// dir, the Raft node joins or bootstraps its cluster, and the leader-only
// work starts whenever this node becomes an established leader. Every
// dependency exists before anything that uses it, so nothing is bound late.
func New(ctx context.Context, cfg Config) (*Broker, error) {
	if cfg.Cluster.NodeID == "" {
		return nil, errors.New("broker: node id is empty")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock()
	}
	// Commands are stamped, and the scheduler reckons, on one clock that a
	// wall-clock step cannot move (clock.go).
	cfg.Clock = steady(cfg.Clock)
	if cfg.MaxPendingBytes <= 0 {
		cfg.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if cfg.ReplicaCheckInterval == 0 {
		cfg.ReplicaCheckInterval = DefaultReplicaCheckInterval
	}
	if cfg.Group == "" {
		cfg.Group = GroupID
	}
	if (cfg.Group == GroupID) != (cfg.Runtime == nil) {
		return nil, fmt.Errorf("broker: group %q: the legacy group %q, and only it, opens its own runtime", cfg.Group, GroupID)
	}
	b := &Broker{
		groupID: cfg.Group,
		id:      cfg.Cluster.NodeID,
		log:     cfg.Logger,
		clock:   cfg.Clock,
		cfg:     cfg,
		feed:    &changeFeed{},
		gate:    &pendingGate{limit: cfg.MaxPendingBytes},

		proposals: &fsm.Proposals{},
		leases:    metrics.NewLeases(leaseForgetAfter),
		repairs:   newRepairs(),
	}
	b.handBacks = &handBackSender{
		log: b.log, queue: make(chan HandBack, handBackQueue), peers: cfg.Peers,
		route: b.Route, nack: b.Nack,
	}
	// 1. The state machine. It tells the feed which queues each applied
	//    batch touched; the feed passes that on to the scheduler only while
	//    a leadership term runs (followers have no one to tell).
	flog := cfg.Logger.With("component", "fsm")
	b.state = fsm.New(fsm.Options{
		Logger:    flog,
		Notifier:  b.feed,
		Proposals: b.proposals,
		// An entry or snapshot from a newer raftq must not be guessed at:
		// say so plainly, then stop (the FSM applies nothing more).
		Fatal: func(err error) {
			flog.Error("stopping the node: the log holds what this build cannot apply; upgrade this node", "err", err)
			panic(err)
		},
	})
	b.reads = b.state.Reader()
	b.versions = versionGate{reads: b.reads}

	// 2. The Raft runtime over that state machine: the legacy group's
	//    cluster node, or what the caller opens for a placed group.
	//    Leadership reaches the rest of the node as events (leader.go),
	//    not as a callback.
	open := cfg.Runtime
	if open == nil {
		open = func(ctx context.Context, f raft.FSM) (Runtime, error) { return openLegacy(ctx, cfg, f) }
	}
	rt, err := open(ctx, b.state)
	if err != nil {
		return nil, fmt.Errorf("start cluster node: %w", err)
	}
	b.rt, b.group = rt, rt.Group()
	b.node, _ = rt.(*cluster.Node)

	// 3. The scheduler proposes through this broker, which stamps time
	//    and the log version on every command.
	b.sched = scheduler.New(scheduler.Config{
		Logger:     cfg.Logger, // the scheduler names its own component
		Clock:      cfg.Clock,
		NodeID:     b.id,
		LeaseGrace: cfg.LeaseGrace,
		// What a lost term granted and never sent goes back to the
		// leader uncounted, through the hand-back sender (handback.go).
		HandBack:    b.handBacks.add,
		CarryGrants: cfg.CarryGrants,
	}, b.reads, b)

	// 4. The coalescers merge concurrent client writes into one entry.
	b.enqueues = newCoalescer(coalesceInFlight, coalesceItems, coalesceBytes, b.Propose, buildEnqueue, sizeEnqueue)
	// An enqueue's payloads count against the pending gate until its
	// entry has committed or failed.
	b.enqueues.release = func(r enqueueReq) { b.gate.release(r.held) }
	// Ack entries are proposed here like any command; the scheduler only
	// fills them with the grants of the credit they free (one entry per
	// delivery cycle, proposeAck).
	b.acks = newCoalescer(coalesceInFlight, coalesceItems, coalesceBytes, b.proposeAck, buildAck, sizeAck)

	// 5. The counter audit, a node duty, reaching the leader as any call
	//    is routed; the cluster-version raiser and the replica check,
	//    leader duties.
	b.audit = &counterAudit{
		cfg: cfg.Audit, log: b.log, id: b.id, reads: b.reads, checks: b.state.Integrity(), peers: cfg.Peers,
		route: b.Route, recount: b.Operator().RecountQueues,
	}
	b.metaFollow = &metaFollower{log: b.log, group: b.groupID, meta: cfg.Meta, reads: b.reads, propose: b.Propose, interval: time.Second}
	b.raiser = &versionRaiser{log: b.log, reads: b.reads, voters: rt.VoterVersions, propose: b.Propose,
		servers: func() ([]raft.Server, error) { return raftgroup.LatestServers(b.group.Raft()) }}
	b.replicas = &replicaCheck{
		log: b.log, id: b.id, interval: cfg.ReplicaCheckInterval, peers: cfg.Peers, checks: b.state.Integrity(),
		own: &b.diverged, repairs: b.repairs,
		checkpoint: b.Operator().Checkpoint, mark: b.Operator().MarkDiverged, handOver: b.group.TransferLeadership,
		status: rt.Status, remove: rt.RemoveNode,
	}

	// 6. From now on one owner follows leadership and runs the leader's
	//    duties for each established term, and the node duties until
	//    Close (leader.go).
	b.leader = &leaderWork{log: b.log, node: b.group, duties: b.leaderDuties(), nodeDuties: b.nodeDuties()}
	b.leader.start()

	// 7. Drain-time estimates, sampled from this node's own state.
	b.startDrain()

	// 8. The disk guard measures free space and tells the other nodes.
	b.disk = startDisk(diskguard.Config{
		Node:    b.id,
		Dir:     cfg.Cluster.DataDir,
		MinFree: cfg.MinFreeDisk,
		// Room for the next snapshot, and for the next wal segment.
		Reserve: func() uint64 { return uint64(max(b.group.NewestSnapshotBytes(), 0) + b.group.LogReserveBytes()) },
	}, cfg.DiskCheckInterval, b.log, rt.SetDiskLow, rt.VoterDisks)
	return b, nil
}

// openLegacy opens the legacy data group's cluster node (gossip,
// bootstrap-expect, the reconciler, leave) on cfg.RaftPort over f.
func openLegacy(ctx context.Context, cfg Config, f raft.FSM) (Runtime, error) {
	ccfg := cfg.Cluster
	ccfg.Logger = cfg.Logger.With("component", "cluster")
	if ccfg.LogVersion == 0 || ccfg.LogVersion > fsm.MaxLogVersion {
		// Advertised in gossip: what this build applies. A caller may
		// advertise less, so a test runs a cluster held at an older
		// version, as during a rolling upgrade.
		ccfg.LogVersion = fsm.MaxLogVersion
	}
	ccfg.MaxQueuedBytes = cfg.MaxQueuedBytes
	return cluster.New(ctx, ccfg, cfg.RaftPort, f, nil)
}

// leaseForgetAfter: a pushed lease neither acked nor nacked this long after
// its deadline has expired or been released; its start time is dropped.
const leaseForgetAfter = time.Minute

// drainTau is the time constant of the drain estimates' moving averages:
// long enough that one burst does not make the estimate, short enough
// that a change of pace shows within a minute or two.
const drainTau = time.Minute

// startDrain samples every queue's depth at Config.DrainInterval until
// Close.
func (b *Broker) startDrain() {
	interval := b.cfg.DrainInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	b.drain = metrics.NewDrain(b.reads, drainTau)
	ctx, cancel := context.WithCancel(context.Background())
	b.stopDrain, b.drainDone = cancel, make(chan struct{})
	go func() {
		defer close(b.drainDone)
		b.drain.Run(ctx, interval, b.clock.Now)
	}()
}

// ID is this node's id.
func (b *Broker) ID() string { return b.id }

// Node is the legacy group's cluster node (membership, Raft status and
// admin operations); nil for a placed group (Runtime).
func (b *Broker) Node() *cluster.Node { return b.node }

// GroupID is the group's id (GroupID for the legacy group).
func (b *Broker) GroupID() string { return b.groupID }

// Runtime is the group's Raft runtime and membership view: Runtime().Group()
// for leadership, Apply and snapshots, Status() for its servers.
func (b *Broker) Runtime() Runtime { return b.rt }

// State is the replicated state machine, for reads.
func (b *Broker) State() *fsm.FSM { return b.state }

// DataDir is the node's data directory.
func (b *Broker) DataDir() string { return b.cfg.Cluster.DataDir }

// Scheduler is the leader's delivery engine.
func (b *Broker) Scheduler() *scheduler.Scheduler { return b.sched }

// HandOff transfers leadership to another voter if this node leads, so
// that writes keep flowing there while this node stops. It reports the
// new leader, or "" when this node was not leading.
func (b *Broker) HandOff(ctx context.Context) (string, error) {
	if !b.group.IsLeader() {
		return "", nil
	}
	return b.group.TransferLeadership(ctx, "")
}

// Leave takes this node out of the cluster while it keeps serving (see
// cluster.Node.Leave): a leader hands leadership over first. Close it
// next. ErrBelowExpect (unless force) changes nothing.
func (b *Broker) Leave(ctx context.Context, force bool) error {
	return b.rt.Leave(ctx, force)
}

// Close stops the leader-only work and the coalescers (queued requests
// fail with ErrStopping, never proposed) and shuts the node down. The node
// stays a member of the cluster (a voter, if it was one) unless it left
// first (Leave). Call it after the API has stopped taking calls.
func (b *Broker) Close(ctx context.Context) error {
	var err error
	b.closeOnce.Do(func() {
		b.leader.stop()
		b.stopDrain()
		<-b.drainDone
		b.disk.stop()
		b.enqueues.close()
		b.acks.close()
		err = b.rt.Shutdown(ctx)
	})
	return err
}
