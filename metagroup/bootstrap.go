package metagroup

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
)

// foundingPoll is how often a node without meta state looks for the
// founders in its data replica.
const foundingPoll = 50 * time.Millisecond

// awaitFounding runs while the group has no Raft state: once the data
// log names meta's founders (the raise to the handover), a founder
// bootstraps the group with exactly that configuration, the same on every
// founder, so they elect one leader between them (hashicorp/raft asks
// each initial server to be given the identical configuration). A node
// the data log does not name waits for meta's leader to add it, which
// gives it state; the loop then ends.
func (g *Group) awaitFounding() {
	for {
		if servers, err := raftgroup.LatestServers(g.g.Raft()); err == nil && len(servers) > 0 {
			return // bootstrapped, or added by the leader
		}
		if founders := g.cfg.Data.MetaFounders(); len(founders) > 0 {
			conf := raft.Configuration{}
			self := false
			for _, f := range founders {
				conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(f.ID), Address: raft.ServerAddress(f.Address)})
				self = self || f.ID == g.cfg.NodeID
			}
			if !self {
				g.log.Info("the cluster handed its state over to the meta group; this node is no founder and waits to be added", "founders", len(founders))
				return
			}
			switch err := g.g.Bootstrap(conf); {
			case err == nil:
				g.log.Info("meta group bootstrapped by the data log's founders", "founders", len(founders))
			case errors.Is(err, raft.ErrCantBootstrap):
				// State arrived meanwhile (the leader added us first).
			default:
				g.log.Error("could not bootstrap the meta group", "err", err)
			}
			return
		}
		// A cheap read, polled often: identity and settings writes wait
		// for meta from the raise on.
		if !g.wait(g.ctx, min(g.cfg.Interval, foundingPoll)) {
			return
		}
	}
}
