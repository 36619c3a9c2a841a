// Package groups is the group manager (issue 22): the data groups this
// host runs, keyed by group id. The legacy group ("data", the host's
// broker) is always one of them; every other is a group the meta group's
// record places on this node, opened when the record names the node and
// closed when it no longer does (NATS's createRaftGroup: idempotent by
// id, one registry). One watch loop follows meta's state; each placed
// group's leader keeps the group's Raft configuration in step with the
// record (reconfig.go). DESIGN.md says what was chosen and rejected.
package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// Dir is the directory under the data dir that holds the placed groups'
// Raft state, one directory per group id (DATA/groups/<id>).
const Dir = "groups"

// Defaults for the zero Config fields.
const (
	DefaultInterval      = time.Second
	DefaultDepartGrace   = 30 * time.Second
	DefaultPromoteAfter  = cluster.DefaultPromoteAfter
	DefaultPromoteMaxLag = cluster.DefaultPromoteMaxLag
)

// Progress asks node id, whose API is at grpcAddr, for the index of the
// last entry of group it applied (a nonvoter's catch-up).
type Progress func(ctx context.Context, group, id, grpcAddr string) (uint64, error)

// Config configures a host's group manager.
type Config struct {
	// NodeID is this node's id; DataDir its data dir (the caller holds
	// its lock), the placed groups' state in DataDir/groups/<id>.
	NodeID, DataDir string
	// Port is the node's Raft port; every placed group registers on it
	// under its id.
	Port *raftmux.Mux
	// Membership is the node's gossip (the legacy group's cluster node
	// builds it; every group reads it).
	Membership *membership.Membership
	// Meta is the node's meta replica: the records this manager follows.
	Meta *meta.FSM
	// MetaCaughtUp reports whether the meta replica has applied what its
	// leader committed, as far as this node knows: a founder bootstraps
	// only then, so a replica replaying an old record after a restart
	// does not found a group again. nil: always.
	MetaCaughtUp func() bool
	// Legacy is the legacy data group (the host's broker).
	Legacy *broker.Broker
	// Broker is what each placed group's broker is built from: the
	// node's clock, limits, logger, meta state and, in Cluster, the Raft
	// timing, log store, advertised addresses, version, zone and the
	// promotion rule (PromoteAfter, PromoteMaxLag). Group, Runtime,
	// Cluster.DataDir and Peers are set per group.
	Broker broker.Config
	// Progress asks a replica for its applied index of a group (nil: a
	// replica added to a group stays a nonvoter).
	Progress Progress
	// ClusterID is the node's cluster id (Status); nil: "".
	ClusterID func() string
	// Interval paces the watch loop and the leaders' reconciliation when
	// nothing wakes them (default 1s); DepartGrace is how long a group
	// whose record dropped this node keeps running to learn its removal
	// from the leader before it closes anyway (default 30s).
	Interval, DepartGrace time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Manager runs the data groups of this host. Its methods are safe for
// concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	groups map[string]*placed // the placed groups running here
	closed bool

	wake   chan struct{} // a group's leadership changed
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// placed is one placed group running here.
type placed struct {
	id string
	b  *broker.Broker
	rt *cluster.Placed
	// departing: when the record stopped naming this node (zero while
	// it does).
	departing time.Time
	stop      context.CancelFunc // ends its founding loop
	wg        sync.WaitGroup
}

// New builds the manager and starts its watch loop: it opens at once the
// groups meta's replica already places here (a restart re-opens them
// from DataDir/groups).
func New(cfg Config) (*Manager, error) {
	if cfg.NodeID == "" || cfg.DataDir == "" || cfg.Port == nil || cfg.Membership == nil || cfg.Meta == nil || cfg.Legacy == nil {
		return nil, errors.New("groups: NodeID, DataDir, Port, Membership, Meta and Legacy are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DepartGrace <= 0 {
		cfg.DepartGrace = DefaultDepartGrace
	}
	if cfg.MetaCaughtUp == nil {
		cfg.MetaCaughtUp = func() bool { return true }
	}
	if cfg.ClusterID == nil {
		cfg.ClusterID = func() string { return "" }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "groups"), groups: map[string]*placed{}, wake: make(chan struct{}, 1)}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.wg.Go(m.watch)
	return m, nil
}

// Get is the data group id running on this host (the legacy group
// included).
func (m *Manager) Get(id string) (*broker.Broker, bool) {
	if id == m.cfg.Legacy.GroupID() {
		return m.cfg.Legacy, true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.groups[id]
	if !ok {
		return nil, false
	}
	return p.b, true
}

// Local is every data group running on this host, sorted by group id.
func (m *Manager) Local() []*broker.Broker {
	m.mu.Lock()
	out := []*broker.Broker{m.cfg.Legacy}
	for _, p := range m.groups {
		out = append(out, p.b)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *broker.Broker) int {
		switch {
		case a.GroupID() < b.GroupID():
			return -1
		case a.GroupID() > b.GroupID():
			return 1
		}
		return 0
	})
	return out
}

// Leaders is the ids of the data groups this node leads, sorted.
func (m *Manager) Leaders() []string {
	var out []string
	for _, b := range m.Local() {
		if b.Runtime().Group().IsLeader() {
			out = append(out, b.GroupID())
		}
	}
	return out
}

// Close stops the watch loop, then every placed group (a leader hands
// its leadership over first, within ctx). The legacy group is the
// host's to close. Files stay: a restart re-opens the groups.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	all := make([]*placed, 0, len(m.groups))
	for _, p := range m.groups {
		all = append(all, p)
	}
	m.groups = map[string]*placed{}
	m.mu.Unlock()
	var errs []error
	for _, p := range all {
		if err := m.closeGroup(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watch is the one loop that follows meta's records: every change of
// meta's state, of gossip (an address a founder waits for) and of a
// group's leadership, and every Interval (a departing group's
// configuration, which has no feed here).
func (m *Manager) watch() {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		changed, gossip := m.cfg.Meta.Changed(), m.cfg.Membership.Changes()
		m.reconcile()
		m.cfg.Membership.SetLeads(m.Leaders())
		select {
		case <-m.ctx.Done():
			return
		case <-changed:
		case <-gossip:
		case <-m.wake:
		case <-t.C:
		}
	}
}

// reconcile opens what the records place here and departs what they no
// longer do.
func (m *Manager) reconcile() {
	records, legacy := m.cfg.Meta.Groups()
	m.mu.Lock()
	running := map[string]bool{}
	for id := range m.groups {
		running[id] = true
	}
	m.mu.Unlock()
	open, depart := plan(m.cfg.NodeID, records, cmpOr(legacy, m.cfg.Legacy.GroupID()), running)
	for _, rec := range open {
		if err := m.open(rec); err != nil {
			m.log.Error("could not open a data group placed on this node; retrying", "group", rec.ID, "err", err)
		}
	}
	now := time.Now()
	for _, id := range depart {
		m.mu.Lock()
		p := m.groups[id]
		m.mu.Unlock()
		if p == nil {
			continue
		}
		if p.departing.IsZero() {
			p.departing = now
			m.log.Info("the meta group no longer places this data group here; leaving it", "group", id)
		}
		_, exists := m.cfg.Meta.Group(id)
		self, known := inConfig(p.rt.Group(), m.cfg.NodeID)
		switch act := departAction(exists, known, self, now.Sub(p.departing), m.cfg.DepartGrace); act {
		case actWait:
		case actClose, actCloseDelete:
			del := act == actCloseDelete
			m.mu.Lock()
			delete(m.groups, id)
			m.mu.Unlock()
			if err := m.closeGroup(m.ctx, p); err != nil {
				m.log.Warn("closing a departed data group", "group", id, "err", err)
			}
			if del {
				if err := os.RemoveAll(m.dir(id)); err != nil {
					m.log.Error("could not delete a departed data group's state", "group", id, "err", err)
				} else {
					m.log.Info("data group left: its state on this node is deleted", "group", id)
				}
			} else {
				m.log.Warn("data group closed without seeing its removal; its state stays in the data dir", "group", id, "dir", m.dir(id))
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// plan is the manager's decision: the records naming self that no group
// running here serves (to open, in id order), and the running groups
// that no record names self in (to depart, sorted). The legacy group is
// the host's and never planned.
func plan(self string, records []*meta.Group, legacy string, running map[string]bool) (open []*meta.Group, depart []string) {
	placedHere := map[string]bool{}
	for _, r := range records {
		if r.ID == legacy || r.ID == broker.GroupID || !slices.Contains(r.Replicas, self) {
			continue
		}
		placedHere[r.ID] = true
		if !running[r.ID] {
			open = append(open, r)
		}
	}
	for id := range running {
		if !placedHere[id] {
			depart = append(depart, id)
		}
	}
	slices.SortFunc(open, func(a, b *meta.Group) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	slices.Sort(depart)
	return open, depart
}

// departure actions.
type action int

const (
	actWait        action = iota // keep running: the removal may still arrive
	actClose                     // close, keep the state (the removal never arrived)
	actCloseDelete               // close and delete the state: no longer this node's
)

// departAction decides for a group running here whose record no longer
// names this node. exists: the group is still in meta; known: the group's
// configuration could be read, self: it lists this node; since: how long
// ago the record dropped the node. A departing leader waits too: its
// leader duty hands leadership to a replica the record names, whose
// duty then removes this node (reconfig.go).
func departAction(exists, known, self bool, since, grace time.Duration) action {
	switch {
	case !exists:
		return actCloseDelete // the group is gone from meta: its state is nobody's
	case known && !self:
		return actCloseDelete // the leader's removal reached this replica
	case since >= grace:
		return actClose
	}
	return actWait
}

// inConfig reports whether g's latest configuration lists id (known:
// it could be read).
func inConfig(g *raftgroup.Group, id string) (self, known bool) {
	servers, err := raftgroup.LatestServers(g.Raft())
	if err != nil {
		return false, false
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return true, true
		}
	}
	return false, true
}

func (m *Manager) dir(id string) string { return filepath.Join(m.cfg.DataDir, Dir, id) }

// open opens placed group rec here; a no-op if it runs already.
func (m *Manager) open(rec *meta.Group) error {
	m.mu.Lock()
	if _, ok := m.groups[rec.ID]; ok || m.closed {
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	if err := raftmux.ValidGroupID(rec.ID); err != nil {
		return err
	}
	dir := m.dir(rec.ID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("groups: %w", err)
	}
	p := &placed{id: rec.ID}
	c := m.cfg.Broker.Cluster
	bcfg := m.cfg.Broker
	bcfg.Group = rec.ID
	bcfg.Cluster.NodeID = m.cfg.NodeID
	bcfg.Cluster.DataDir = dir
	// The group's replica check, a follower's recount request and a
	// hand-back to a remote leader reach peers through API calls that
	// do not name a group yet (the edge routes them to the legacy
	// group): off for a placed group until it does.
	bcfg.Peers = nil
	bcfg.ReplicaCheckInterval = -1
	bcfg.Logger = m.cfg.Broker.Logger
	if bcfg.Logger == nil {
		bcfg.Logger = m.cfg.Logger
	}
	bcfg.Logger = bcfg.Logger.With("group", rec.ID)
	founder := rec.Epoch == 1
	bcfg.Runtime = func(ctx context.Context, f raft.FSM) (broker.Runtime, error) {
		lv := c.LogVersion
		if lv == 0 || lv > fsm.MaxLogVersion {
			lv = fsm.MaxLogVersion
		}
		rt, err := cluster.OpenPlaced(cluster.PlacedConfig{
			Group: rec.ID, NodeID: m.cfg.NodeID, Dir: dir, LogStore: c.LogStore,
			SnapshotThreshold: c.SnapshotThreshold, SnapshotInterval: c.SnapshotInterval, TrailingLogs: c.TrailingLogs,
			HeartbeatTimeout: c.HeartbeatTimeout, ElectionTimeout: c.ElectionTimeout, LeaderLeaseTimeout: c.LeaderLeaseTimeout,
			GRPCAdvertise: c.GRPCAdvertise, ClientGRPCAdvertise: c.ClientGRPCAdvertise, HTTPAdvertise: c.HTTPAdvertise,
			LogVersion: lv, Version: c.Version, Zone: c.Zone,
			Founder: founder, ClusterID: m.cfg.ClusterID,
			OnLeadership: func(raftgroup.Leadership) { notify(m.wake) },
			Logger:       bcfg.Logger,
		}, m.cfg.Membership, m.cfg.Port, f)
		if err != nil {
			return nil, err
		}
		rc := &reconfig{
			group: rec.ID, self: m.cfg.NodeID, log: bcfg.Logger, g: rt.Group(), r: rt.Group().Raft(),
			meta: m.cfg.Meta, ms: m.cfg.Membership, progress: m.cfg.Progress,
			promoteAfter: cmpDur(c.PromoteAfter, DefaultPromoteAfter), maxLag: cmpU64(c.PromoteMaxLag, DefaultPromoteMaxLag),
			interval: m.cfg.Interval,
		}
		rt.Start(rc.run)
		p.rt = rt
		return rt, nil
	}
	b, err := broker.New(m.ctx, bcfg)
	if err != nil {
		return err
	}
	p.b = b
	fctx, stop := context.WithCancel(m.ctx)
	p.stop = stop
	if !p.rt.Group().HasState() {
		p.wg.Go(func() { m.found(fctx, p) })
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return m.closeGroup(context.Background(), p)
	}
	m.groups[rec.ID] = p
	m.mu.Unlock()
	m.log.Info("data group opened on this node", "group", rec.ID, "epoch", rec.Epoch, "replicas", rec.Replicas,
		"existing_state", p.rt.Group().HasState())
	return nil
}

// closeGroup stops p's founding loop and its broker.
func (m *Manager) closeGroup(ctx context.Context, p *placed) error {
	if p.stop != nil {
		p.stop()
	}
	p.wg.Wait()
	if err := p.b.Close(ctx); err != nil {
		return fmt.Errorf("groups: close %q: %w", p.id, err)
	}
	return nil
}

func cmpDur(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

func cmpU64(a, b uint64) uint64 {
	if a > 0 {
		return a
	}
	return b
}

// notify does a non-blocking, coalescing send on a 1-buffered channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
