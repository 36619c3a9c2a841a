package metagroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/raftq/raftq/meta"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"github.com/raftq/raftq/raftgroup"
)

// nodes are the nodes a data group's replica may go on: the data group's
// servers (which its reconciler keeps in step with gossip: a node gone
// past --dead-node-timeout, removed or left is not one), with the zone
// and disk state gossip says (Config.Nodes).
func (g *Group) nodes() ([]meta.Node, error) {
	servers, err := g.cfg.Data.Servers()
	if err != nil {
		return nil, err
	}
	out := make([]meta.Node, 0, len(servers))
	for _, s := range servers {
		n := meta.Node{ID: string(s.ID)}
		if g.cfg.Nodes != nil {
			n.Zone, n.DiskLow = g.cfg.Nodes(n.ID)
		}
		out = append(out, n)
	}
	return out, nil
}

// reconcilePool makes one change, if any is due, so the data groups meta
// records follow the settings groups and replicas: a missing group is
// registered ("g1", "g2", …, the lowest free), one over the count that
// holds no queue is removed (the highest id first; a group holding
// queues is never removed, nor the legacy group), and a group whose
// replicas are fewer than the setting (nodes joined) or on a node that is
// gone gets the set meta.ChooseReplicas keeps converging to, against the
// epoch read. The legacy group is left alone: its replicas are the data
// group's voters, which its own reconciler keeps.
func (g *Group) reconcilePool(ctx context.Context) (changed bool, err error) {
	nodes, err := g.nodes()
	if err != nil || len(nodes) == 0 {
		return false, err
	}
	set := g.fsm.Settings()
	groups, legacy := g.fsm.Groups()
	want, reps := meta.GroupCount(set.Groups), meta.ReplicaCount(set.Replicas, len(nodes))
	if len(groups) < want {
		id := nextGroupID(groups)
		replicas := meta.ChooseReplicas(nodes, groups, nil, reps)
		if len(replicas) == 0 {
			return false, nil // every node is short of disk
		}
		if _, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_RegisterGroup{RegisterGroup: &metav1.RegisterGroup{
			Group: id, Replicas: replicas}}}); err != nil {
			return true, fmt.Errorf("register data group %s: %w", id, err)
		}
		g.log.Info("data group registered", "data_group", id, "replicas", replicas, "groups", len(groups)+1, "want", want)
		return true, nil
	}
	if len(groups) > want {
		load := g.fsm.Load()
		for _, gr := range slices.Backward(groups) {
			if gr.ID == legacy || load[gr.ID] > 0 {
				continue
			}
			if _, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_RemoveGroup{RemoveGroup: &metav1.RemoveGroup{Group: gr.ID}}}); err != nil {
				return true, fmt.Errorf("remove data group %s: %w", gr.ID, err)
			}
			g.log.Info("data group removed", "data_group", gr.ID, "groups", len(groups)-1, "want", want)
			return true, nil
		}
		// The rest hold queues: the pool stays larger than asked.
	}
	for _, gr := range groups {
		if gr.ID == legacy {
			continue
		}
		next := meta.ChooseReplicas(nodes, groups, gr.Replicas, reps)
		if len(next) == 0 || slices.Equal(next, gr.Replicas) {
			continue
		}
		if _, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_SetGroupReplicas{SetGroupReplicas: &metav1.SetGroupReplicas{
			Group: gr.ID, Replicas: next, ExpectedEpoch: gr.Epoch}}}); err != nil {
			return true, fmt.Errorf("data group %s replicas %v → %v: %w", gr.ID, gr.Replicas, next, err)
		}
		g.log.Info("data group replicas changed", "data_group", gr.ID, "from", gr.Replicas, "to", next, "epoch", gr.Epoch+1)
		return true, nil
	}
	return false, nil
}

// nextGroupID is the lowest "gN" (N ≥ 1) no group has.
func nextGroupID(groups []*meta.Group) string {
	for n := 1; ; n++ {
		id := "g" + strconv.Itoa(n)
		if !slices.ContainsFunc(groups, func(gr *meta.Group) bool { return gr.ID == id }) {
			return id
		}
	}
}

// PlaceQueue places queue before it is created (issue 22: meta commits
// the placement first, then the group creates the queue), at meta's
// leader, and returns its group and the placement version the answer is
// from. dlq is the dead-letter queue it names ("" none): a queue goes to
// its DLQ's group when the DLQ is placed, and an unplaced DLQ is placed
// with it, since the data group creates it in the same entry. A
// requested group ("" none) that does not exist is meta.ErrNotFound; one
// that would split the queue from its DLQ, or differs from where the
// queue is already placed, is meta.ErrConflict (FAILED_PRECONDITION).
// Otherwise the least loaded group (meta.ChooseGroup). Idempotent: a
// queue already placed answers its group, and a retry (after a lost
// answer, or a crash between the DLQ's placement and the queue's) answers
// as the first did. Calls are serialized here so each choice sees the
// placements before it.
func (g *Group) PlaceQueue(ctx context.Context, queue, dlq, requestedGroup string) (group string, version uint64, err error) {
	if !g.g.LeaderReady() {
		// A leader whose term's barrier has not applied may not hold
		// every placement yet.
		return "", 0, raftgroup.ErrNotLeader
	}
	if dlq == queue {
		dlq = ""
	}
	g.placeMu.Lock()
	defer g.placeMu.Unlock()
	// The log refusing the choice (not the request) means the state moved
	// between the read and the commit: a group the pool removed
	// (ErrNotFound), or the queue or its DLQ placed meanwhile by the
	// legacy group's reconciliation (ErrConflict). Choose again, from
	// the state the refusal applied after; choose answers an existing
	// placement, or the honest conflict.
	for try := 0; ; try++ {
		group, err = g.choose(queue, dlq, requestedGroup)
		if err != nil {
			return "", 0, err
		}
		err = g.place(ctx, dlq, group)
		if err == nil {
			err = g.place(ctx, queue, group)
		}
		if err == nil || !(errors.Is(err, meta.ErrNotFound) || errors.Is(err, meta.ErrConflict)) || try == 2 {
			break
		}
	}
	if err != nil {
		return "", 0, err
	}
	p, ok, version := g.fsm.Lookup(queue)
	if !ok || p.Group != group {
		// Dropped or moved between our commit and this read (not by this
		// leader's duties, which leave a fresh placement alone).
		return "", 0, fmt.Errorf("%w: queue %s changed placement while being placed", meta.ErrConflict, queue)
	}
	return group, version, nil
}

// choose is where queue goes: where it is, else meta.ChooseGroup.
func (g *Group) choose(queue, dlq, requested string) (string, error) {
	var bound []meta.Placement
	if dlq != "" {
		if p, ok, _ := g.fsm.Lookup(dlq); ok {
			bound = append(bound, p)
		}
	}
	if p, ok, _ := g.fsm.Lookup(queue); ok {
		if requested != "" && requested != p.Group {
			return "", fmt.Errorf("%w: queue %s is placed on group %s, not %s", meta.ErrConflict, queue, p.Group, requested)
		}
		requested = p.Group // it stays; its DLQ must follow it
	}
	groups, _ := g.fsm.Groups()
	return meta.ChooseGroup(groups, g.fsm.Load(), requested, bound)
}

// place commits queue's placement on group ("" queue: nothing); placed
// there already answers OK (the log's own idempotency).
func (g *Group) place(ctx context.Context, queue, group string) error {
	if queue == "" {
		return nil
	}
	if _, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_PlaceQueue{PlaceQueue: &metav1.PlaceQueue{Queue: queue, Group: group}}}); err != nil {
		return fmt.Errorf("place queue %s on group %s: %w", queue, group, err)
	}
	return nil
}
