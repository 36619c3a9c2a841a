package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
)

// reconciler keeps the Raft configuration in step with gossip while this
// node leads (see DESIGN.md, "Reconciler"). It runs as a leader-only
// service of each established term.
type reconciler struct {
	cfg  Config
	log  *slog.Logger
	r    groupRaft
	ms   *membership.Membership
	id   *identity
	wake chan struct{} // gossip changed
	// passes counts finished passes (tests wait for one).
	passes atomic.Uint64
	// checkNode, with TLS, proves that node id answers at its Raft
	// address with its own node certificate; a member that cannot is
	// never added (gossip alone does not make a voter).
	checkNode func(ctx context.Context, id, addr string) error
}

// groupRaft is what this package calls on the data group's raft instance
// (raftgroup.Group.Raft): reading and changing its configuration. The
// group owns the instance; applying, snapshots and shutdown are its.
type groupRaft interface {
	GetConfiguration() raft.ConfigurationFuture
	AddVoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	AddNonvoter(id raft.ServerID, address raft.ServerAddress, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	RemoveServer(id raft.ServerID, prevIndex uint64, timeout time.Duration) raft.IndexFuture
	State() raft.RaftState
	CommitIndex() uint64
	LastIndex() uint64
}

// PeerProgress asks node id, whose API gossip advertises at grpcAddr, for
// the index of the last entry it applied. The leader calls it to decide
// when a nonvoter has caught up; it must answer within ctx.
type PeerProgress func(ctx context.Context, id, grpcAddr string) (applied uint64, err error)

// joinGrace is how long a new member may present no cluster id before
// its refusal is logged: a joiner takes the id from the members it sees
// a moment after it joined gossip.
const joinGrace = 3 * time.Second

// progressTimeout bounds asking a nonvoter for its applied index.
const progressTimeout = time.Second

func newReconciler(cfg Config, log *slog.Logger, r groupRaft, ms *membership.Membership, id *identity) *reconciler {
	return &reconciler{cfg: cfg, log: log, r: r, ms: ms, id: id, wake: make(chan struct{}, 1)}
}

// reconcileState is the reconciler's memory across passes within one term.
type reconcileState struct {
	// missing: servers in the Raft configuration that gossip has never
	// reported (e.g. reaped before this node became leader), since when.
	missing map[string]time.Time
	// floorLogged: failed voters already reported as kept for the floor.
	floorLogged map[string]bool
	// refused: members whose certificate check failed, with the error
	// last logged (logged again only when it changes).
	refused map[string]string
	// caughtUp: nonvoters whose applied index has been within
	// PromoteMaxLag of the commit index at every check since when.
	caughtUp map[string]time.Time
	// behind: nonvoters last found behind (or not answering), with why,
	// logged again only when it changes.
	behind map[string]string
	// notAdmitted: members refused for their cluster id, with why,
	// logged again only when it changes.
	notAdmitted map[string]string
}

// reconcileLoop makes the Raft configuration follow gossip while this node
// is leader: on every gossip event, on a periodic resync, and when a failed
// member's grace period ends.
func (rc *reconciler) run(ctx context.Context) {
	tick := time.NewTicker(rc.cfg.reconcileInterval)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	st := &reconcileState{missing: map[string]time.Time{}, floorLogged: map[string]bool{}, refused: map[string]string{},
		caughtUp: map[string]time.Time{}, behind: map[string]string{}, notAdmitted: map[string]string{}}
	for {
		next, err := rc.reconcile(ctx, st)
		rc.passes.Add(1)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, raftgroup.ErrLeadershipLost) || errors.Is(err, raftgroup.ErrShutdown) {
				return // the leadership loop ends this term
			}
			rc.log.Warn("reconcile membership", "err", err)
			if next <= 0 || next > time.Second {
				next = time.Second
			}
		}
		if next <= 0 {
			next = time.Hour
		}
		wake.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-rc.wake:
		case <-tick.C:
		case <-wake.C:
		}
	}
}

// reconcile makes one pass. It returns how soon it wants the next one: a
// failed member's grace period ending, or a nonvoter's next progress
// check (0 if nothing is pending).
func (rc *reconciler) reconcile(ctx context.Context, st *reconcileState) (time.Duration, error) {
	cfgIndex, servers, err := raftgroup.LatestConfig(rc.r)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	members := rc.ms.Records()

	inConf := make(map[string]raft.Server, len(servers))
	voters := 0
	for _, s := range servers {
		inConf[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	var errs []error
	var next time.Duration
	soonest := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}

	// Live members not in the configuration (or with a changed address)
	// join as nonvoters; a nonvoter that has caught up becomes a voter.
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if id == rc.cfg.NodeID || m.State != membership.Alive || !m.MetaOK || m.Leaving || m.NoAdd || m.Meta.Raft == "" {
			continue
		}
		s, ok := inConf[id]
		sameAddr := ok && string(s.Address) == m.Meta.Raft
		if sameAddr && s.Suffrage == raft.Voter {
			continue
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if sameAddr {
			wait, promoted, err := rc.promote(ctx, st, cfgIndex, id, m)
			if err != nil {
				if errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, raftgroup.ErrLeadershipLost) || errors.Is(err, raftgroup.ErrShutdown) {
					return 0, err
				}
				errs = append(errs, err)
			}
			if promoted {
				voters++
			}
			soonest(wait)
			continue
		}
		if m.Meta.Corrupt {
			// Its Raft state is corrupt: it asks for its own removal,
			// and comes back, wiped, without the flag (DESIGN.md,
			// "Corrupt state").
			continue
		}
		// Gossip is not membership: a member joins the configuration only
		// if it presents this cluster's id (DESIGN.md, "Cluster identity").
		if why := admission(rc.id.get(), m.Meta, ok); why != "" {
			if young := joinGrace - now.Sub(m.Since); m.Meta.ClusterID == "" && m.Meta.IDs && young > 0 {
				// A joiner takes the id from the members it sees, a
				// moment after it joined gossip: look again then.
				soonest(young)
			} else if st.notAdmitted[id] != why {
				st.notAdmitted[id] = why
				rc.log.Warn("not adding gossip member to the cluster: "+why, "id", id, "gossip_addr", m.GossipAddr,
					"its_cluster_id", m.Meta.ClusterID, "cluster_id", rc.id.get())
			}
			continue
		}
		delete(st.notAdmitted, id)
		if rc.checkNode != nil {
			cctx, cancel := context.WithTimeout(ctx, memberCheckTimeout)
			err := rc.checkNode(cctx, id, m.Meta.Raft)
			cancel()
			if err != nil {
				if st.refused[id] != err.Error() {
					st.refused[id] = err.Error()
					rc.log.Warn("not adding gossip member as a voter: it did not show its node certificate", "id", id, "raft_addr", m.Meta.Raft, "err", err)
				}
				errs = append(errs, fmt.Errorf("check node %s: %w", id, err))
				continue
			}
			delete(st.refused, id)
		}
		var f raft.IndexFuture
		if ok && s.Suffrage == raft.Voter {
			// A voter at a new address (a container back with another
			// IP) keeps its log, and its vote.
			rc.log.Info("updating voter address", "id", id, "raft_addr", m.Meta.Raft)
			f = rc.r.AddVoter(raft.ServerID(id), raft.ServerAddress(m.Meta.Raft), 0, 0)
		} else {
			// A new member (or one whose state was wiped) takes the
			// log as a nonvoter first: a voter that has yet to catch
			// up would count toward quorum while acking nothing.
			rc.log.Info("adding nonvoter; promoted to voter once caught up", "id", id, "raft_addr", m.Meta.Raft)
			f = rc.r.AddNonvoter(raft.ServerID(id), raft.ServerAddress(m.Meta.Raft), 0, 0)
			delete(st.caughtUp, id)
			delete(st.behind, id)
			soonest(rc.recheck())
		}
		if err := f.Error(); err != nil {
			err = raftgroup.MapError("add server "+id, err)
			if errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, raftgroup.ErrLeadershipLost) || errors.Is(err, raftgroup.ErrShutdown) {
				return 0, err
			}
			errs = append(errs, err)
			continue
		}
	}

	// Left members go at once; failed (or never seen) ones after the
	// grace period, and a voter only if that keeps BootstrapExpect voters.
	for _, s := range servers {
		id := string(s.ID)
		if id == rc.cfg.NodeID {
			continue
		}
		m, known := members[id]
		if known && m.State == membership.Alive {
			delete(st.missing, id)
			delete(st.floorLogged, id)
			continue
		}
		reason := "left"
		if !known || m.State != membership.Left {
			reason = "failed"
			since, seen := m.Since, known
			if !seen {
				if t, ok := st.missing[id]; ok {
					since = t
				} else {
					since = now
					st.missing[id] = now
				}
			}
			if wait := since.Add(rc.cfg.DeadNodeTimeout).Sub(now); wait > 0 {
				soonest(wait)
				continue
			}
			if s.Suffrage == raft.Voter && voters-1 < rc.cfg.BootstrapExpect {
				if !st.floorLogged[id] {
					st.floorLogged[id] = true
					rc.log.Warn("keeping failed voter: removing it would leave fewer voters than bootstrap-expect",
						"id", id, "voters", voters, "bootstrap_expect", rc.cfg.BootstrapExpect)
				}
				continue
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		rc.log.Info("removing server", "id", id, "reason", reason)
		if err := rc.r.RemoveServer(s.ID, 0, 0).Error(); err != nil {
			err = raftgroup.MapError("remove server "+id, err)
			if errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, raftgroup.ErrLeadershipLost) || errors.Is(err, raftgroup.ErrShutdown) {
				return 0, err
			}
			errs = append(errs, err)
			continue
		}
		delete(st.missing, id)
		delete(st.floorLogged, id)
		if s.Suffrage == raft.Voter {
			voters--
		}
	}
	for id := range st.missing {
		if _, ok := inConf[id]; !ok {
			delete(st.missing, id)
		}
	}
	for id := range st.caughtUp {
		if s, ok := inConf[id]; !ok || s.Suffrage != raft.Nonvoter {
			delete(st.caughtUp, id)
		}
	}
	for id := range st.behind {
		if s, ok := inConf[id]; !ok || s.Suffrage != raft.Nonvoter {
			delete(st.behind, id)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return next, fmt.Errorf("cluster: reconcile: %w", err)
	}
	return next, nil
}

// recheck is how soon a nonvoter's progress is checked again: often
// enough that a caught-up node is promoted about PromoteAfter after it
// caught up, and checked more than once on the way.
func (rc *reconciler) recheck() time.Duration {
	return min(max(rc.cfg.PromoteAfter/3, 50*time.Millisecond), time.Second)
}

// promote checks nonvoter id's progress: once its applied index has been
// within PromoteMaxLag of this leader's commit index at every check for
// PromoteAfter, it becomes a voter (at configuration index cfgIndex, so a
// removal in between, a repair's, is not undone). It returns when to
// check again and whether it promoted.
func (rc *reconciler) promote(ctx context.Context, st *reconcileState, cfgIndex uint64, id string, m membership.Record) (time.Duration, bool, error) {
	p := rc.cfg.PeerProgress
	if p == nil {
		// Nothing can tell whether it caught up: it waits, a nonvoter.
		return 0, false, nil
	}
	pctx, cancel := context.WithTimeout(ctx, progressTimeout)
	applied, err := p(pctx, id, m.Meta.GRPC)
	cancel()
	commit := rc.r.CommitIndex()
	lag := uint64(0)
	if commit > applied {
		lag = commit - applied
	}
	if err != nil || lag > rc.cfg.PromoteMaxLag {
		why := fmt.Sprintf("%d entries behind", lag)
		if err != nil {
			why = "progress unknown: " + err.Error()
		}
		if _, was := st.caughtUp[id]; was || st.behind[id] == "" {
			rc.log.Info("nonvoter not caught up yet; not promoting it", "id", id, "why", why, "applied", applied, "commit", commit, "max_lag", rc.cfg.PromoteMaxLag)
		}
		delete(st.caughtUp, id)
		st.behind[id] = why
		return rc.recheck(), false, nil
	}
	now := time.Now()
	since, ok := st.caughtUp[id]
	if !ok {
		since = now
		st.caughtUp[id] = now
		delete(st.behind, id)
	}
	if wait := since.Add(rc.cfg.PromoteAfter).Sub(now); wait > 0 {
		return min(wait, rc.recheck()), false, nil
	}
	rc.log.Info("promoting nonvoter to voter: caught up", "id", id, "applied", applied, "commit", commit, "caught_up_for", now.Sub(since).Round(time.Millisecond))
	if err := rc.r.AddVoter(raft.ServerID(id), raft.ServerAddress(m.Meta.Raft), cfgIndex, 0).Error(); err != nil {
		return rc.recheck(), false, raftgroup.MapError("promote "+id, err)
	}
	delete(st.caughtUp, id)
	// Raft reports no observation for a change of suffrage: say it, so
	// VoterVersions' watchers read again.
	rc.ms.NotifyChanged()
	return 0, true, nil
}

func hasServer(servers []raft.Server, id string) bool {
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// otherVoters counts voters in the configuration other than self.
func otherVoters(r groupRaft, self string) int {
	servers, err := raftgroup.LatestServers(r)
	if err != nil {
		return 0
	}
	c := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != self {
			c++
		}
	}
	return c
}

// notify does a non-blocking, coalescing send on a 1-buffered channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
