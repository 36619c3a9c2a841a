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
)

// reconciler keeps the Raft configuration in step with gossip while this
// node leads (see DESIGN.md, "Reconciler"). It runs as a leader-only
// service of each established term.
type reconciler struct {
	cfg  Config
	log  *slog.Logger
	r    *raft.Raft
	ms   *membership
	wake chan struct{} // gossip changed
	// passes counts finished passes (tests wait for one).
	passes atomic.Uint64
	// checkNode, with TLS, proves that node id answers at its Raft
	// address with its own node certificate; a member that cannot is
	// never added (gossip alone does not make a voter).
	checkNode func(ctx context.Context, id, addr string) error
}

func newReconciler(cfg Config, log *slog.Logger, r *raft.Raft, ms *membership) *reconciler {
	return &reconciler{cfg: cfg, log: log, r: r, ms: ms, wake: make(chan struct{}, 1)}
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
}

// reconcileLoop makes the Raft configuration follow gossip while this node
// is leader: on every gossip event, on a periodic resync, and when a failed
// member's grace period ends.
func (rc *reconciler) run(ctx context.Context) {
	tick := time.NewTicker(rc.cfg.reconcileInterval)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	st := &reconcileState{missing: map[string]time.Time{}, floorLogged: map[string]bool{}, refused: map[string]string{}}
	for {
		next, err := rc.reconcile(ctx, st)
		rc.passes.Add(1)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrShutdown) {
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

// reconcile makes one pass. It returns how soon a failed member's grace
// period ends (0 if none is pending).
func (rc *reconciler) reconcile(ctx context.Context, st *reconcileState) (time.Duration, error) {
	servers, err := latestServers(rc.r)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	members := rc.ms.snapshot()

	inConf := make(map[string]raft.Server, len(servers))
	voters := 0
	for _, s := range servers {
		inConf[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	var errs []error

	// Live members not in the configuration (or with a changed address)
	// become voters.
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if id == rc.cfg.NodeID || m.state != memberAlive || !m.metaOK || m.leaving || m.noAdd || m.meta.Raft == "" {
			continue
		}
		s, ok := inConf[id]
		if ok && s.Suffrage == raft.Voter && string(s.Address) == m.meta.Raft {
			continue
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if rc.checkNode != nil {
			cctx, cancel := context.WithTimeout(ctx, memberCheckTimeout)
			err := rc.checkNode(cctx, id, m.meta.Raft)
			cancel()
			if err != nil {
				if st.refused[id] != err.Error() {
					st.refused[id] = err.Error()
					rc.log.Warn("not adding gossip member as a voter: it did not show its node certificate", "id", id, "raft_addr", m.meta.Raft, "err", err)
				}
				errs = append(errs, fmt.Errorf("check node %s: %w", id, err))
				continue
			}
			delete(st.refused, id)
		}
		rc.log.Info("adding voter", "id", id, "raft_addr", m.meta.Raft)
		if err := rc.r.AddVoter(raft.ServerID(id), raft.ServerAddress(m.meta.Raft), 0, 0).Error(); err != nil {
			err = wrapRaftErr("add voter "+id, err)
			if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrShutdown) {
				return 0, err
			}
			errs = append(errs, err)
			continue
		}
		if !ok || s.Suffrage != raft.Voter {
			voters++
		}
	}

	// Left members go at once; failed (or never seen) ones after the
	// grace period, and a voter only if that keeps BootstrapExpect voters.
	var next time.Duration
	for _, s := range servers {
		id := string(s.ID)
		if id == rc.cfg.NodeID {
			continue
		}
		m, known := members[id]
		if known && m.state == memberAlive {
			delete(st.missing, id)
			delete(st.floorLogged, id)
			continue
		}
		reason := "left"
		if !known || m.state != memberLeft {
			reason = "failed"
			since, seen := m.since, known
			if !seen {
				if t, ok := st.missing[id]; ok {
					since = t
				} else {
					since = now
					st.missing[id] = now
				}
			}
			if wait := since.Add(rc.cfg.DeadNodeTimeout).Sub(now); wait > 0 {
				if next == 0 || wait < next {
					next = wait
				}
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
			err = wrapRaftErr("remove server "+id, err)
			if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrShutdown) {
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
	if err := errors.Join(errs...); err != nil {
		return next, fmt.Errorf("cluster: reconcile: %w", err)
	}
	return next, nil
}

// latestServers returns the latest Raft configuration.
func latestServers(r *raft.Raft) ([]raft.Server, error) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, wrapRaftErr("get configuration", err)
	}
	return f.Configuration().Servers, nil
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
func otherVoters(r *raft.Raft, self string) int {
	servers, err := latestServers(r)
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
