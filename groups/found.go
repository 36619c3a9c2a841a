package groups

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
)

// found runs while placed group p has no Raft state (metagroup's
// awaitFounding, the same idea): while meta's record is at epoch 1 (never
// changed since its registration) and names this node, every founder
// bootstraps the group with the record's replicas as voters, the
// identical configuration on each (which hashicorp/raft asks of initial
// servers, and allows a late founder to repeat: its bootstrap entry is
// the leader's first). Once the record has changed, this node was added
// to a running group and waits for its leader's log.
func (m *Manager) found(ctx context.Context, p *placed) {
	g := p.rt.Group()
	logged := false
	for {
		gossip := m.cfg.Membership.Changes()
		if servers, err := raftgroup.LatestServers(g.Raft()); err == nil && len(servers) > 0 {
			return // bootstrapped, or added by the leader
		}
		rec, ok := m.cfg.Meta.Group(p.id)
		if !ok || rec.Epoch != 1 || !slices.Contains(rec.Replicas, m.cfg.NodeID) {
			m.log.Info("data group: no founder (its record changed since registration); waiting for its leader to add this node", "group", p.id)
			return
		}
		if m.cfg.MetaCaughtUp() {
			conf, missing := founders(rec, m.cfg.NodeID, m.cfg.Membership.RaftAddr(), m.raftAddr)
			if missing == "" {
				switch err := g.Bootstrap(conf); {
				case err == nil:
					m.log.Info("data group bootstrapped by its registered replicas", "group", p.id, "replicas", rec.Replicas)
				case errors.Is(err, raft.ErrCantBootstrap):
					// State arrived meanwhile (the leader's log).
				default:
					m.log.Error("could not bootstrap a data group", "group", p.id, "err", err)
				}
				return
			}
			if !logged {
				m.log.Info("data group founder waits for a replica's Raft address", "group", p.id, "replica", missing)
				logged = true
			}
		}
		t := time.NewTimer(m.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.cfg.Meta.Changed():
		case <-gossip:
		case <-t.C:
		}
		t.Stop()
	}
}

// raftAddr is where node id's Raft port is: meta's member record, else
// its gossip metadata ("" while neither knows).
func (m *Manager) raftAddr(id string) string {
	for _, mem := range m.cfg.Meta.Members() {
		if mem.NodeID == id && mem.RaftAddr != "" {
			return mem.RaftAddr
		}
	}
	if md, ok := m.cfg.Membership.MetaOf(id); ok {
		return md.Raft
	}
	return ""
}

// founders is the configuration a founder bootstraps rec with: every
// replica a voter, at the Raft address addr knows (this node's own,
// selfAddr). missing names a replica whose address is not known yet ("":
// none).
func founders(rec *meta.Group, self, selfAddr string, addr func(id string) string) (conf raft.Configuration, missing string) {
	for _, id := range rec.Replicas {
		a := selfAddr
		if id != self {
			a = addr(id)
		}
		if a == "" {
			return raft.Configuration{}, id
		}
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(a)})
	}
	return conf, ""
}
