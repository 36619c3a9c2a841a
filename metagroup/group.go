// Package metagroup runs the meta group on this node (issue 21): a Raft
// group of its own (raftgroup, on the node's one Raft port, under the id
// "meta", its state in DATA/meta) over the meta state machine (package
// meta), what bootstraps it and the meta leader's duties. Every node runs
// it: up to meta_voters nodes as voters, the others as nonvoters, so each
// edge reads auth, settings and placement from a local replica.
//
// Nothing starts the group but the data group's log: the entry raising
// the cluster to fsm.HandoverVersion names the founders, and each founder
// bootstraps meta with exactly that configuration (bootstrap.go). Its
// leader then seeds meta from the data group's frozen copy and keeps
// meta's servers, placements and cluster version in step with the data
// group (duties.go). DESIGN.md says why it is built this way.
package metagroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// metaSegmentSize is the meta group's wal segment size: its log is a few
// entries a minute, and snapshots every 1024 (a 64 MiB default segment,
// allocated up front, would take a small disk's room for nothing).
const metaSegmentSize = 1 << 20

// ErrStarting: the cluster has handed its cluster-wide state over, but the
// meta group has no leader or is not seeded yet. Retry shortly.
var ErrStarting = errors.New("the meta group is starting (its first leader is seeding it)")

// DataGroup is what the meta group reads of this node's data group: its
// local replica's state and its Raft configuration.
type DataGroup interface {
	// Handover is the seed's copy (fsm.Reader.Handover).
	Handover() (fsm.Handover, bool)
	// MetaFounders are meta's founding voters (fsm.Reader.MetaFounders).
	MetaFounders() []fsm.MetaServer
	// ClusterVersion is the data group's cluster version.
	ClusterVersion() uint32
	// Servers is the data group's latest Raft configuration.
	Servers() ([]raft.Server, error)
}

// Config configures the meta group of one node.
type Config struct {
	// NodeID is this node's id (its Raft server id in every group).
	NodeID string
	// DataDir is the node's data dir; the group keeps its state in
	// DataDir/meta. The caller holds the data dir's lock.
	DataDir string
	// Port is the node's Raft port.
	Port *raftmux.Mux
	// Data is this node's data group.
	Data DataGroup
	// GRPCAdvertise, ClientGRPCAdvertise, APIAddrs, PeerChanges and
	// Preambles are the node's API addresses and what its membership
	// knows of the others' (raftgroup.Config).
	GRPCAdvertise, ClientGRPCAdvertise string
	APIAddrs                           func(id string) (grpc, client string, ok bool)
	PeerChanges                        func() <-chan struct{}
	Preambles                          func(raft.ServerAddress) bool
	// Nodes is what gossip says of node id: its zone ("" none) and
	// whether its disk is short (the replicas' placement); nil: neither
	// is known.
	Nodes func(id string) (zone string, diskLow bool)
	// Now is the clock proposals are stamped with; default time.Now.
	Now func() time.Time
	// Raft timing (raftgroup's defaults when zero).
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// Interval paces the founders' wait and the leader's reconciliation
	// when nothing wakes them; default 500ms.
	Interval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Group is the meta group on this node. Its methods are safe for
// concurrent use.
type Group struct {
	cfg Config
	log *slog.Logger
	fsm *meta.FSM
	g   *raftgroup.Group

	placeMu sync.Mutex // PlaceQueue: one choice and commit at a time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// Open opens the meta group's Raft state in DataDir/meta over f and
// starts it: a node whose state is empty waits to be a founder (the data
// log names it) or to be added by meta's leader.
func Open(cfg Config, f *meta.FSM) (*Group, error) {
	if cfg.NodeID == "" || cfg.DataDir == "" || cfg.Port == nil || cfg.Data == nil || f == nil {
		return nil, errors.New("metagroup: NodeID, DataDir, Port, Data and the FSM are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("group", meta.MetaGroupID)
	rg, err := raftgroup.Open(raftgroup.Config{
		Group: meta.MetaGroupID, NodeID: cfg.NodeID, Dir: filepath.Join(cfg.DataDir, meta.MetaGroupID), Port: cfg.Port,
		// The meta state is small (members, groups, placements,
		// auth): snapshot it often, keep a short tail.
		SnapshotThreshold: 1024, TrailingLogs: 1024, WALSegmentSize: metaSegmentSize,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
		GRPCAdvertise: cfg.GRPCAdvertise, ClientGRPCAdvertise: cfg.ClientGRPCAdvertise,
		APIAddrs: cfg.APIAddrs, PeerChanges: cfg.PeerChanges, Preambles: cfg.Preambles,
		Logger: log,
	}, f)
	if err != nil {
		return nil, fmt.Errorf("metagroup: %w", err)
	}
	g := &Group{cfg: cfg, log: log, fsm: f, g: rg}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	rg.Start(g.lead)
	if !rg.HasState() {
		g.wg.Go(g.awaitFounding)
	}
	return g, nil
}

// Raft is the group's Raft runtime (status, faults, leadership).
func (g *Group) Raft() *raftgroup.Group { return g.g }

// FSM is the group's state machine (local reads).
func (g *Group) FSM() *meta.FSM { return g.fsm }

// Route is where a call only meta's leader serves goes (raftgroup.RouteTo).
func (g *Group) Route(ctx context.Context, wait time.Duration) (raftgroup.Route, error) {
	return raftgroup.RouteTo(ctx, g.g, wait)
}

// Active reports whether the cluster has handed its cluster-wide state to
// the meta group (the data group's cluster version reached the handover):
// from then on auth and settings writes go to meta's leader.
func (g *Group) Active() bool { return g.cfg.Data.ClusterVersion() >= fsm.HandoverVersion }

// Shutdown hands meta's leadership over when this node leads (bounded by
// ctx), then closes the group.
func (g *Group) Shutdown(ctx context.Context) error {
	if g.g.IsLeader() && len(g.voters()) > 1 {
		if _, err := g.g.TransferLeadership(ctx, ""); err != nil {
			g.log.Warn("meta leadership not handed over before stopping", "err", err)
		}
	}
	return g.Close()
}

// Close stops the group at once (its duties, then Raft and its stores).
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.cancel()
		g.wg.Wait()
		g.closeErr = g.g.Close()
	})
	return g.closeErr
}

// voters are meta's voters in its latest configuration.
func (g *Group) voters() []string {
	servers, err := raftgroup.LatestServers(g.g.Raft())
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out
}

// Propose commits cmd in meta's log (this node must lead it) and returns
// its result; a refused command's error is its result's.
func (g *Group) Propose(ctx context.Context, cmd *metav1.Command) (*meta.Result, error) {
	b, err := meta.Encode(cmd, 0, g.cfg.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	out, err := g.g.Apply(ctx, b)
	if err != nil {
		return nil, err
	}
	r, ok := out.(*meta.Result)
	if !ok {
		return nil, fmt.Errorf("metagroup: unexpected apply result %T", out)
	}
	if r.Err != nil {
		if errors.Is(r.Err, meta.ErrNotSeeded) {
			return r, fmt.Errorf("%w: %w", ErrStarting, r.Err)
		}
		return r, r.Err
	}
	return r, nil
}

// wait waits for d, ctx or a change of meta's state or of the node's
// leadership of meta, whichever comes first; false when ctx ended.
func (g *Group) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-g.fsm.Changed():
	}
	return true
}
