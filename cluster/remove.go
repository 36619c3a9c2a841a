package cluster

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
)

// RemoveNode removes server id from the Raft configuration (leader only).
// It overrides the failed-node grace period. Removing a voter that would
// leave fewer than BootstrapExpect voters fails with ErrBelowExpect unless
// force is set: the cluster was sized for that many, and the reconciler
// keeps that floor too. A node still alive in gossip is not re-added
// until it rejoins gossip (a restart). Errors: raftgroup.ErrNotLeader,
// raftgroup.ErrUnknownNode, ErrRemoveLeader, ErrBelowExpect.
func (n *Node) RemoveNode(ctx context.Context, id string, force bool) error {
	if !n.g.IsLeader() {
		return raftgroup.ErrNotLeader
	}
	if id == n.cfg.NodeID {
		return ErrRemoveLeader
	}
	for {
		// The check and the removal are one step: the removal names the
		// configuration it was checked against, and raft refuses it if
		// another change (the reconciler's) came in between.
		f := n.r.GetConfiguration()
		if err := f.Error(); err != nil {
			return raftgroup.MapError("get configuration", err)
		}
		servers, index := f.Configuration().Servers, f.Index()
		voters, target := 0, (*raft.Server)(nil)
		for i, s := range servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
			if string(s.ID) == id {
				target = &servers[i]
			}
		}
		if target == nil {
			return fmt.Errorf("%w: %q", raftgroup.ErrUnknownNode, id)
		}
		if target.Suffrage == raft.Voter && voters-1 < n.cfg.BootstrapExpect && !force {
			return fmt.Errorf("%w: removing %s would leave %d voters, bootstrap-expect is %d",
				ErrBelowExpect, id, voters-1, n.cfg.BootstrapExpect)
		}
		n.ms.PreventAdd(id)
		n.log.Info("removing server on request", "id", id, "force", force)
		err := n.g.RemoveServer(ctx, id, index)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if now := n.r.GetConfiguration(); now.Error() != nil || now.Index() == index {
			return err
		}
		// The configuration moved on: decide again against the new one.
	}
}
