package meta

import (
	"cmp"
	"fmt"
	"slices"
)

// The placement policy (issue 22): pure functions of what the caller
// passes, deterministic (every tie broken by id), so the meta leader's
// duties and their tests give the same answer for the same state. None is
// called at apply: the leader decides and proposes the existing commands
// (RegisterGroup, SetGroupReplicas, PlaceQueue), which the log records.

// Defaults of the settings groups and replicas (0 = the default).
const (
	// DefaultGroups is the data group count while the data group runtime
	// and per-queue routing are not in: the legacy group alone. The
	// issue's default (about one group leader per node) is switched on
	// with them (metagroup/DESIGN.md, "The pool").
	DefaultGroups = 1
	// DefaultReplicas is a data group's voter count (never more than the
	// nodes).
	DefaultReplicas = 3
	// MaxGroupsSetting and MaxReplicasSetting bound what the API takes
	// for groups and replicas.
	MaxGroupsSetting   = 256
	MaxReplicasSetting = MaxReplicas
)

// GroupCount is the number of data groups the setting asks for.
func GroupCount(setting uint32) int {
	if setting == 0 {
		return DefaultGroups
	}
	return int(setting)
}

// ReplicaCount is how many replicas a data group has under the setting
// replicas with nodes nodes: the setting (0 = DefaultReplicas), never
// more than the nodes.
func ReplicaCount(setting uint32, nodes int) int {
	n := int(setting)
	if n == 0 {
		n = DefaultReplicas
	}
	return min(n, nodes)
}

// Node is a node a replica may be placed on, as the meta leader sees it.
type Node struct {
	ID   string
	Zone string // "" when the node declares none
	// DiskLow: the node says its data dir is short of free space
	// (gossip's disk_low); false when unknown.
	DiskLow bool
}

// ChooseReplicas chooses n distinct nodes for a group's replicas: the
// current replicas that are still nodes are kept (the first by id when
// there are more than n), then nodes are added one at a time, each from
// the zone with the fewest of the chosen so far (so replicas spread over
// as many zones as the nodes declare), then with the fewest replicas of
// any group (groups), then by id. A node short of disk is never added
// (kept if it already is a replica: moving data off it is not this
// function's job). Fewer than n come back when there are not enough
// nodes. The answer is sorted; calling it again with the answer as
// current returns the same set, so a duty calling it converges.
func ChooseReplicas(nodes []Node, groups []*Group, current []string, n int) []string {
	byID := map[string]Node{}
	for _, nd := range nodes {
		byID[nd.ID] = nd
	}
	load := map[string]int{}
	for _, g := range groups {
		for _, r := range g.Replicas {
			load[r]++
		}
	}
	cur := slices.Clone(current)
	slices.Sort(cur)
	cur = slices.Compact(cur)
	chosen := []string{}
	zones := map[string]int{}
	for _, id := range cur {
		if nd, ok := byID[id]; ok && len(chosen) < n {
			chosen = append(chosen, id)
			zones[nd.Zone]++
		}
	}
	rest := slices.Clone(nodes)
	slices.SortFunc(rest, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	rest = slices.CompactFunc(rest, func(a, b Node) bool { return a.ID == b.ID })
	for len(chosen) < n {
		best := -1
		for i, nd := range rest {
			if nd.DiskLow || slices.Contains(chosen, nd.ID) {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := rest[best]
			if c := cmp.Or(cmp.Compare(zones[nd.Zone], zones[b.Zone]), cmp.Compare(load[nd.ID], load[b.ID])); c < 0 {
				best = i
			}
		}
		if best < 0 {
			break
		}
		nd := rest[best]
		chosen = append(chosen, nd.ID)
		zones[nd.Zone]++
		load[nd.ID]++
	}
	slices.Sort(chosen)
	return chosen
}

// ChooseGroup chooses the data group a new queue is placed on. bound are
// the groups of the existing queues it must share a log with (its
// dead-letter queue, the queues that dead-letter into it): dead-lettering
// and redrive are atomic only within one log. requested is the group the
// caller names ("" for none).
//
//   - Queues it is bound to on two groups: ErrConflict (they are split
//     already; no choice keeps them together).
//   - requested names no group: ErrNotFound.
//   - requested differs from the bound queues' group: ErrConflict.
//   - Else requested, else the bound queues' group, else the group with
//     the fewest queues placed (load, group id → count), then by id.
//
// groups must not be empty (ErrNotFound otherwise).
func ChooseGroup(groups []*Group, load map[string]int, requested string, bound []Placement) (string, error) {
	ids := make([]string, 0, len(groups))
	for _, g := range groups {
		ids = append(ids, g.ID)
	}
	slices.Sort(ids)
	var with Placement
	for _, b := range bound {
		switch {
		case with.Group == "":
			with = b
		case b.Group != with.Group:
			return "", fmt.Errorf("%w: queue %s is on group %s and queue %s on group %s; a queue and its dead-letter queue share one group",
				ErrConflict, with.Queue, with.Group, b.Queue, b.Group)
		}
	}
	if requested != "" {
		if _, ok := slices.BinarySearch(ids, requested); !ok {
			return "", fmt.Errorf("%w: group %q", ErrNotFound, requested)
		}
		if with.Group != "" && with.Group != requested {
			return "", fmt.Errorf("%w: queue %s is on group %s, not %s; a queue and its dead-letter queue share one group (dead-lettering and redrive are atomic within one log)",
				ErrConflict, with.Queue, with.Group, requested)
		}
		return requested, nil
	}
	if with.Group != "" {
		return with.Group, nil
	}
	if len(ids) == 0 {
		return "", fmt.Errorf("%w: no data group to place a queue on", ErrNotFound)
	}
	best := ids[0]
	for _, id := range ids[1:] {
		if load[id] < load[best] {
			best = id
		}
	}
	return best, nil
}

// Transfer is a leadership move PlanLeaders asks for.
type Transfer struct {
	Group, From, To string
}

// LeaderBound is the most data groups one node should lead: ⌈groups ÷
// nodes⌉ (0 without nodes).
func LeaderBound(groups, nodes int) int {
	if nodes <= 0 {
		return 0
	}
	return (groups + nodes - 1) / nodes
}

// PlanLeaders plans the leadership transfers that bring every node to at
// most LeaderBound leaderships. leaders maps group id → its leader's node
// id (a group with no known leader is left alone); nodes are the live
// nodes a leadership may move to. Hysteresis: nothing moves while every
// node is within the bound, however uneven below it; only a node over it
// gives up leaderships, each to a replica of that group among nodes that
// is under the bound (the fewest leaderships first, then by id), from the
// over-bound node's groups in id order. At most one transfer per group.
// The transfers come in the order planned.
func PlanLeaders(groups []*Group, leaders map[string]string, nodes []string) []Transfer {
	live := map[string]bool{}
	for _, n := range nodes {
		live[n] = true
	}
	if len(live) == 0 {
		return nil
	}
	led := map[string]int{}
	var known []*Group
	for _, g := range groups {
		if l := leaders[g.ID]; l != "" {
			led[l]++
			known = append(known, g)
		}
	}
	slices.SortFunc(known, func(a, b *Group) int { return cmp.Compare(a.ID, b.ID) })
	bound := LeaderBound(len(groups), len(live))
	var out []Transfer
	moved := map[string]bool{}
	for {
		// The node furthest over the bound, then by id.
		var from string
		for n, c := range led {
			if c > bound && (from == "" || c > led[from] || c == led[from] && n < from) {
				from = n
			}
		}
		if from == "" {
			return out
		}
		t, ok := Transfer{}, false
		for _, g := range known {
			if moved[g.ID] || leaders[g.ID] != from {
				continue
			}
			to := ""
			for _, r := range g.Replicas {
				if r == from || !live[r] || led[r] >= bound {
					continue
				}
				if to == "" || led[r] < led[to] || led[r] == led[to] && r < to {
					to = r
				}
			}
			if to != "" {
				t, ok = Transfer{Group: g.ID, From: from, To: to}, true
				break
			}
		}
		if !ok {
			// Nothing of from's can move; it is over the bound for good
			// this call (its groups' replicas are all at the bound).
			led[from] = bound
			continue
		}
		out = append(out, t)
		moved[t.Group] = true
		led[t.From]--
		led[t.To]++
	}
}
