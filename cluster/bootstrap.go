package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
)

// bootstrapper founds the cluster on a node without Raft state once
// BootstrapExpect servers without state see each other in gossip (see
// DESIGN.md, "Bootstrap").
type bootstrapper struct {
	cfg  Config
	log  *slog.Logger
	g    *raftgroup.Group
	ms   *membership.Membership
	id   *identity
	wake chan struct{} // gossip changed
	done atomic.Int32  // BootstrapCluster calls that succeeded here
}

func newBootstrapper(cfg Config, log *slog.Logger, g *raftgroup.Group, ms *membership.Membership, id *identity) *bootstrapper {
	return &bootstrapper{cfg: cfg, log: log, g: g, ms: ms, id: id, wake: make(chan struct{}, 1)}
}

// run waits until this node has Raft state, bootstrapping the cluster when
// the founders see each other. On the way out it publishes State in the
// node's metadata.
//
// The configuration is deterministic: the BootstrapExpect alive servers
// with the lowest ids, all voters. Each of them calls BootstrapCluster with
// that identical configuration, which Raft allows; a server outside the set
// waits to be added by the leader. With more than one server the set must
// stay the same for bootstrapSettle first, so that views still converging
// after a join do not yield two different configurations.
//
// The 100 ms ticker re-checks the settle period and LastIndex: Raft
// publishes no event when a leader first replicates to this node.
func (b *bootstrapper) run(ctx context.Context, wg *sync.WaitGroup, joined <-chan struct{}) {
	defer wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	warned := map[string]bool{}
	var pending string // founders seen last time, and since when
	var pendingSince time.Time
	for b.g.Raft().LastIndex() == 0 {
		select {
		case <-joined: // with seeds configured, look at the cluster first
			if b.joining(warned) {
				pending = ""
				break
			}
			conf, ok := b.founders(warned)
			key := fmt.Sprint(conf.Servers)
			switch {
			case !ok:
				pending = ""
			case key != pending && b.cfg.BootstrapExpect > 1:
				pending, pendingSince = key, time.Now()
			case key == pending && time.Since(pendingSince) < bootstrapSettle:
			default:
				if b.bootstrap(conf) {
					continue
				}
				pending = ""
			}
		default:
		}
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-t.C:
		}
	}
	if err := b.id.persist(); err != nil {
		b.log.Error("recording cluster id", "err", err)
	}
	b.ms.MarkHasState()
}

// joining reports whether this node is to join an existing cluster rather
// than found one: its data dir records a cluster id (a node set aside for
// repair, or one that joined before), or it sees a cluster it was started
// to join, whose id it then presents so that the leader admits it (see
// DESIGN.md, "Cluster identity"). What stops it is logged once.
func (b *bootstrapper) joining(warned map[string]bool) bool {
	b.id.mu.Lock()
	have, recorded := b.id.id, b.id.persisted
	b.id.mu.Unlock()
	if recorded {
		if msg := "data dir records cluster " + have; !warned[msg] {
			warned[msg] = true
			b.log.Info("this data dir belongs to an existing cluster: never bootstrapping, waiting to be added to it", "cluster_id", have)
		}
		return true
	}
	cid, why := joinable(b.cfg.BootstrapExpect, b.cfg.NodeID, b.ms.Records())
	if why != "" && !warned[why] {
		warned[why] = true
		b.log.Warn("not joining the cluster gossip shows: "+why, "bootstrap_expect", b.cfg.BootstrapExpect)
	}
	if cid != "" && cid != have {
		_ = b.id.set(cid, false, "joining the cluster of the members this node sees")
	}
	return cid != ""
}

// founders returns the bootstrap configuration if the gossip view allows
// this node to bootstrap now: no member has state, and this node is among
// the BootstrapExpect alive servers with the lowest ids.
func (b *bootstrapper) founders(warned map[string]bool) (raft.Configuration, bool) {
	type cand struct{ id, raft string }
	var cands []cand
	members := b.ms.Records()
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if id == b.cfg.NodeID || m.State != membership.Alive || !m.MetaOK || m.Leaving {
			continue
		}
		if m.Meta.State {
			return raft.Configuration{}, false // a cluster exists: wait to be added to it
		}
		if m.Meta.ClusterID != "" {
			continue // it joins a cluster (or is set aside for repair): no founder
		}
		if m.Meta.Expect != b.cfg.BootstrapExpect {
			if !warned[id] {
				warned[id] = true
				b.log.Error("gossip member expects a different bootstrap size; not bootstrapping with it",
					"member", id, "its_expect", m.Meta.Expect, "our_expect", b.cfg.BootstrapExpect)
			}
			continue
		}
		cands = append(cands, cand{id, m.Meta.Raft})
	}
	cands = append(cands, cand{b.cfg.NodeID, b.ms.RaftAddr()})
	if len(cands) < b.cfg.BootstrapExpect {
		return raft.Configuration{}, false
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].id < cands[j].id })
	cands = cands[:b.cfg.BootstrapExpect]
	if !slices.ContainsFunc(cands, func(c cand) bool { return c.id == b.cfg.NodeID }) {
		return raft.Configuration{}, false // not a founder: the leader will add us
	}
	var conf raft.Configuration
	for _, c := range cands {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(c.id), Address: raft.ServerAddress(c.raft)})
	}
	return conf, true
}

// bootstrap applies conf; it reports whether this node now has state.
func (b *bootstrapper) bootstrap(conf raft.Configuration) bool {
	// The group stands for election at once when it is the only voter.
	err := b.g.Bootstrap(conf)
	switch {
	case err == nil:
		b.done.Add(1)
		b.log.Info("bootstrapped cluster", "servers", describeServers(conf.Servers))
		// Each founder makes one; the first leader's wins (it records
		// it, its followers take it: Node.syncIdentity).
		b.id.found(newClusterID())
		return true
	case errors.Is(err, raft.ErrCantBootstrap):
		return true // state arrived from a leader meanwhile
	default:
		b.log.Error("bootstrap failed", "err", err)
		return false
	}
}

// describeServers renders servers for a log line as "id@address (voter)";
// raft.Server has no String method, and slog's fallback printed
// `[%+v []]`.
func describeServers(servers []raft.Server) string {
	parts := make([]string, len(servers))
	for i, s := range servers {
		parts[i] = fmt.Sprintf("%s@%s (%s)", s.ID, s.Address, strings.ToLower(s.Suffrage.String()))
	}
	return strings.Join(parts, ", ")
}
