package metagroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"github.com/raftq/raftq/raftgroup"
)

// maxPlacementsPerRound bounds the placement proposals of one round, so
// a round stays short whatever the backlog.
const maxPlacementsPerRound = 256

// dropGrace is how long a placement on the legacy group whose queue the
// data group does not hold is left before it is dropped: PlaceQueue
// commits a placement before the group creates the queue, so a fresh
// one is not yet in the data replica. Measured on this leader's clock
// from the round that first saw it missing (a new leader starts over).
const dropGrace = 5 * time.Second

// term is what one meta leader term's duties remember between rounds.
type term struct {
	missing map[string]time.Time // legacy placements without a queue → first seen so
}

// lead is the meta leader's one duty loop, run by raftgroup for each
// established term (its Barrier done, so the local state holds every
// committed entry) and stopped when the term ends. Each round does the
// first thing that is not in step yet, in this order: the seed; meta's
// servers against the data group's; the cluster version; the placements.
// Each is idempotent and read afresh each round, so a new leader takes
// over wherever the last one stopped. Rounds run on every change of
// meta's state and at least every Interval.
func (g *Group) lead(ctx context.Context) {
	backoff := g.cfg.Interval
	t := &term{missing: map[string]time.Time{}}
	for {
		err := g.round(ctx, t)
		if ctx.Err() != nil {
			return
		}
		wait := g.cfg.Interval
		if err != nil {
			g.log.Warn("meta leader duty failed; retrying", "err", err, "retry_in", backoff)
			wait, backoff = backoff, min(2*backoff, 10*time.Second)
		} else {
			backoff = g.cfg.Interval
		}
		if !g.wait(ctx, wait) {
			return
		}
	}
}

func (g *Group) round(ctx context.Context, t *term) error {
	if !g.fsm.Seeded() {
		return g.seed(ctx)
	}
	if changed, err := g.reconcileServers(); changed || err != nil {
		return err
	}
	if v := g.cfg.Data.ClusterVersion(); v > g.fsm.ClusterVersion() {
		_, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_SetClusterVersion{SetClusterVersion: &metav1.SetClusterVersion{Version: v}}})
		return err
	}
	if changed, err := g.reconcilePool(ctx); changed || err != nil {
		return err
	}
	return g.reconcilePlacements(ctx, t, time.Now())
}

// seed proposes meta's first state, copied from the data group's local
// replica once it holds the handover: its identities, tokens, grants and
// settings are frozen there from that entry on, so any replica's copy
// past it is the same. The data group becomes the legacy group "data"
// with its voters as replicas and every queue placed on it (a new
// cluster seeds the same way, with no queues yet).
func (g *Group) seed(ctx context.Context) error {
	ho, ok := g.cfg.Data.Handover()
	if !ok {
		return nil // the data log has not reached the handover here yet
	}
	servers, err := g.cfg.Data.Servers()
	if err != nil {
		return err
	}
	var replicas []string
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			replicas = append(replicas, string(s.ID))
		}
	}
	slices.Sort(replicas)
	sd := &metav1.Seed{Auth: ho.Auth, ClusterVersion: ho.ClusterVersion, MaxQueuedBytes: ho.MaxQueuedBytes, MaxQueues: ho.MaxQueues,
		LegacyGroup: meta.LegacyGroupID, LegacyReplicas: replicas, Queues: ho.Queues, CopiedAtIndex: ho.Index}
	_, err = g.Propose(ctx, &metav1.Command{Op: &metav1.Command_Seed{Seed: sd}})
	if errors.Is(err, meta.ErrConflict) && g.fsm.Seeded() {
		return nil // an earlier attempt of ours applied first
	}
	if err != nil {
		return fmt.Errorf("seed the meta group: %w", err)
	}
	g.log.Info("meta group seeded from the data group", "queues", len(ho.Queues), "tokens", len(ho.Auth.GetTokens()),
		"identities", len(ho.Auth.GetIdentities()), "data_index", ho.Index, "replicas", replicas)
	return nil
}

// reconcileServers makes one change, if any is due, to meta's Raft
// configuration so it follows the data group's (the member list the
// data group's reconciler keeps in step with gossip): a server gone from
// the data group leaves meta, the voters meta.MetaVoters chooses among
// the data group's voters become or stay meta voters, every other data
// server is a meta nonvoter. One change per round, each against the
// configuration index it read, so two leaders never race a change.
func (g *Group) reconcileServers() (changed bool, err error) {
	r := g.g.Raft()
	index, current, err := raftgroup.LatestConfig(r)
	if err != nil {
		return false, err
	}
	data, err := g.cfg.Data.Servers()
	if err != nil || len(data) == 0 {
		return false, err
	}
	addr := map[string]raft.ServerAddress{}
	var members []meta.Member
	for _, s := range data {
		addr[string(s.ID)] = s.Address
		if s.Suffrage == raft.Voter {
			members = append(members, meta.Member{NodeID: string(s.ID), RaftAddr: string(s.Address)})
		}
	}
	in := map[string]raft.ServerSuffrage{}
	var voters []string
	for _, s := range current {
		in[string(s.ID)] = s.Suffrage
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	want := meta.MetaVoters(voters, members, g.fsm.Settings().MetaVoters)
	const timeout = 10 * time.Second
	change := func(what, id string, f raft.IndexFuture) (bool, error) {
		if err := f.Error(); err != nil {
			return true, fmt.Errorf("meta configuration: %s %s: %w", what, id, err)
		}
		g.log.Info("meta configuration changed", "change", what, "server", id)
		return true, nil
	}
	for _, s := range current {
		if _, ok := addr[string(s.ID)]; !ok {
			return change("remove", string(s.ID), r.RemoveServer(s.ID, index, timeout))
		}
	}
	for _, id := range want {
		if s, ok := in[id]; !ok || s != raft.Voter { // raft.Voter is the zero suffrage
			// An added voter takes part in quorums at once; the meta log
			// is small, so it catches up within a few heartbeats.
			return change("add voter", id, r.AddVoter(raft.ServerID(id), addr[id], index, timeout))
		}
	}
	for _, s := range data {
		if _, ok := in[string(s.ID)]; !ok {
			return change("add nonvoter", string(s.ID), r.AddNonvoter(s.ID, s.Address, index, timeout))
		}
	}
	for _, id := range voters {
		if !slices.Contains(want, id) && id != g.cfg.NodeID {
			return change("demote", id, r.DemoteVoter(raft.ServerID(id), index, timeout))
		}
	}
	return false, nil
}

// reconcilePlacements places every queue of the legacy data group that
// meta does not place yet on it, and drops placements on it of queues the
// data group no longer holds, once missing for dropGrace (PlaceQueue
// places first, so a placement may precede its queue by a moment). The
// legacy group's queues are the one list this node reads; placements on
// the other groups are PlaceQueue's and are left alone (their queues are
// in logs this duty does not read), as is a queue of the legacy group
// placed elsewhere.
func (g *Group) reconcilePlacements(ctx context.Context, t *term, now time.Time) error {
	_, legacy := g.fsm.Groups()
	if legacy == "" {
		return nil
	}
	ho, ok := g.cfg.Data.Handover()
	if !ok {
		return nil
	}
	placed := g.fsm.Placed(legacy)
	n := 0
	for _, q := range ho.Queues {
		if _, found := slices.BinarySearch(placed, q); found {
			continue
		}
		if _, elsewhere, _ := g.fsm.Lookup(q); elsewhere {
			continue
		}
		if n++; n > maxPlacementsPerRound {
			return nil
		}
		if _, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_PlaceQueue{PlaceQueue: &metav1.PlaceQueue{Queue: q, Group: legacy}}}); err != nil {
			return fmt.Errorf("place queue %s: %w", q, err)
		}
	}
	still := map[string]bool{}
	for _, q := range placed {
		if _, found := slices.BinarySearch(ho.Queues, q); found {
			continue
		}
		still[q] = true
		since, seen := t.missing[q]
		if !seen {
			t.missing[q] = now
			continue
		}
		if now.Sub(since) < dropGrace {
			continue
		}
		if n++; n > maxPlacementsPerRound {
			continue
		}
		if _, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_DropPlacement{DropPlacement: &metav1.DropPlacement{Queue: q, Group: legacy}}}); err != nil {
			return fmt.Errorf("drop placement of %s: %w", q, err)
		}
		delete(t.missing, q)
	}
	for q := range t.missing {
		if !still[q] {
			delete(t.missing, q) // its queue appeared, or its placement went
		}
	}
	return nil
}
