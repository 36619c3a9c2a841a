package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
	"github.com/raftq/raftq/raftmux"
)

// ErrPlacedLeave: a placed data group does not leave on its own; the meta
// group's record says where it runs (drop the node from its replicas).
var ErrPlacedLeave = errors.New("a placed data group leaves when the meta group drops this node from its replicas")

// PlacedConfig configures a data group the meta group places on this node
// (issue 22): its Raft runtime in a directory of its own, on the node's
// Raft port under its id, over the node's membership. Its configuration
// follows the meta group's record of it (the caller's leader service
// keeps it in step), not gossip: no bootstrap-expect, no reconciler, no
// leave of its own.
type PlacedConfig struct {
	// Group is the group's id (its Raft id on the port). Required.
	Group string
	// NodeID is this node's Raft server id. Required.
	NodeID string
	// Dir holds the group's Raft state (DATA/groups/<id>); the caller
	// holds the data dir's lock. Required.
	Dir string
	// LogStore, the snapshot settings and the Raft timing are
	// raftgroup.Config's.
	LogStore                                              raftlog.LogStore
	SnapshotThreshold                                     uint64
	SnapshotInterval                                      time.Duration
	TrailingLogs                                          uint64
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// What this node advertises (its Status line in the group).
	GRPCAdvertise, ClientGRPCAdvertise, HTTPAdvertise string
	LogVersion                                        uint32
	Version, Zone                                     string
	// Founder: this node opens the group as one of the replicas it was
	// registered with (the record never changed since), so it may
	// bootstrap it. A node that is no founder refuses every vote while
	// it has no state (raftgroup's vote guard, as a wiped data group's
	// node does): it was added, and waits for the leader's log.
	Founder bool
	// ClusterID is the node's cluster id, for Status; nil: "".
	ClusterID func() string
	// OnLeadership, if set, sees every published leadership value.
	OnLeadership func(raftgroup.Leadership)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Placed is a data group the meta group placed on this node: its Raft
// runtime (Group) and what the data group reads of membership, the same
// calls cluster.Node answers for the legacy group. Its methods are safe
// for concurrent use.
type Placed struct {
	cfg  PlacedConfig
	log  *slog.Logger
	g    *raftgroup.Group
	r    groupRaft
	ms   *membership.Membership
	self selfView

	stopOnce sync.Once
	stopErr  error
}

// OpenPlaced opens group cfg.Group's Raft state in cfg.Dir over f, on the
// node's Raft port, reading the node's membership ms (the host's, which
// the legacy group shares). Start it next, with its leader services.
func OpenPlaced(cfg PlacedConfig, ms *membership.Membership, port *raftmux.Mux, f raft.FSM) (*Placed, error) {
	if ms == nil || port == nil || f == nil {
		return nil, errors.New("cluster: OpenPlaced: membership, Raft port and FSM are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientGRPCAdvertise == "" {
		cfg.ClientGRPCAdvertise = cfg.GRPCAdvertise
	}
	if cfg.LogVersion == 0 {
		cfg.LogVersion = 1
	}
	if cfg.ClusterID == nil {
		cfg.ClusterID = func() string { return "" }
	}
	founder := cfg.Founder
	log := cfg.Logger.With("group", cfg.Group)
	g, err := raftgroup.Open(raftgroup.Config{
		Group: cfg.Group, NodeID: cfg.NodeID, Dir: cfg.Dir, LogStore: cfg.LogStore, Port: port,
		SnapshotThreshold: cfg.SnapshotThreshold, SnapshotInterval: cfg.SnapshotInterval, TrailingLogs: cfg.TrailingLogs,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
		GRPCAdvertise: cfg.GRPCAdvertise, ClientGRPCAdvertise: cfg.ClientGRPCAdvertise,
		APIAddrs: ms.APIAddrs, PeerChanges: ms.Changes, PeersChanged: ms.NotifyChanged,
		// A placed group exists only from builds with the multiplexer:
		// every peer understands preambles.
		Preambles:    ms.PreamblesAt,
		Recorded:     func() bool { return !founder },
		OnLeadership: cfg.OnLeadership,
		Logger:       log,
	}, f)
	if err != nil {
		return nil, fmt.Errorf("cluster: open group %q: %w", cfg.Group, err)
	}
	return &Placed{cfg: cfg, log: log, g: g, r: g.Raft(), ms: ms, self: selfView{
		ID: cfg.NodeID, GRPC: cfg.GRPCAdvertise, Client: cfg.ClientGRPCAdvertise, HTTP: cfg.HTTPAdvertise,
		Raft: ms.RaftAddr(), LogVersion: cfg.LogVersion, Version: cfg.Version, Zone: cfg.Zone,
	}}, nil
}

// Start starts the group's leadership and runs services for each
// established term (raftgroup.Group.Start).
func (p *Placed) Start(services ...func(ctx context.Context)) { p.g.Start(services...) }

// Group is the group's Raft runtime.
func (p *Placed) Group() *raftgroup.Group { return p.g }

// VoterVersions is the log versions the group's servers advertise in the
// node's gossip.
func (p *Placed) VoterVersions() VoterVersions { return voterVersions(p.r, p.ms) }

// VoterDisks is what the group's voters advertise about their disks.
func (p *Placed) VoterDisks() VoterDisks { return voterDisks(p.r, p.ms) }

// SetDiskLow does nothing: the node's one "disk low" flag in gossip is the
// legacy group's to publish (every group's state is on the same file
// system; two publishers with different reserves would flap it).
func (p *Placed) SetDiskLow(bool) {}

// Status is the group's view: its configuration's servers with gossip
// metadata and liveness.
func (p *Placed) Status() Status {
	st, _ := groupStatus(p.g, p.r, p.ms, p.self)
	st.ClusterID = p.cfg.ClusterID()
	return st
}

// RemoveNode removes server id from the group's configuration (leader
// only; a replica repair's): never this leader, and, unless force, never
// a voter whose removal would leave fewer than a majority of the voters
// there are (the record's size is the caller's business).
func (p *Placed) RemoveNode(ctx context.Context, id string, force bool) error {
	if !p.g.IsLeader() {
		return raftgroup.ErrNotLeader
	}
	if id == p.cfg.NodeID {
		return ErrRemoveLeader
	}
	f := p.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftgroup.MapError("get configuration", err)
	}
	if !hasServer(f.Configuration().Servers, id) {
		return fmt.Errorf("%w: %q", raftgroup.ErrUnknownNode, id)
	}
	p.log.Info("removing server on request", "id", id, "force", force)
	return p.g.RemoveServer(ctx, id, f.Index())
}

// Leave is refused (ErrPlacedLeave): the meta record decides.
func (p *Placed) Leave(context.Context, bool) error { return ErrPlacedLeave }

// Shutdown stops the group, handing its leadership over first when it
// leads with other voters (bounded by ctx); idempotent.
func (p *Placed) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() {
		if p.g.IsLeader() && otherVoters(p.r, p.cfg.NodeID) > 0 && ctx.Err() == nil {
			if _, err := p.g.TransferLeadership(ctx, ""); err != nil {
				p.log.Info("group leadership not handed over before stopping", "err", err)
			}
		}
		p.stopErr = p.g.Close()
	})
	return p.stopErr
}

// Close stops the group at once (no hand-over), as a killed process.
func (p *Placed) Close() error {
	p.stopOnce.Do(func() { p.stopErr = p.g.Close() })
	return p.stopErr
}
