package meta

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func nodes(spec ...string) []Node {
	// "id" or "id@zone" or "id!" (disk low)
	var out []Node
	for _, s := range spec {
		n := Node{}
		if s[len(s)-1] == '!' {
			n.DiskLow, s = true, s[:len(s)-1]
		}
		for i := range len(s) {
			if s[i] == '@' {
				n.Zone, s = s[i+1:], s[:i]
				break
			}
		}
		n.ID = s
		out = append(out, n)
	}
	return out
}

func grp(id string, reps ...string) *Group { return &Group{ID: id, Replicas: reps, Epoch: 1} }

func TestChooseReplicas(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []Node
		groups  []*Group
		current []string
		n       int
		want    []string
	}{
		{"fewest replicas first, then id", nodes("n1", "n2", "n3", "n4"), []*Group{grp("data", "n1", "n2", "n3")}, nil, 3, []string{"n1", "n2", "n4"}},
		{"ties by id", nodes("n3", "n2", "n1"), nil, nil, 2, []string{"n1", "n2"}},
		{"more asked than nodes", nodes("n1", "n2"), nil, nil, 3, []string{"n1", "n2"}},
		{"spread over zones before load", nodes("a1@a", "a2@a", "b1@b", "c1@c"), []*Group{grp("g", "b1", "c1")}, nil, 3, []string{"a1", "b1", "c1"}},
		{"two zones, three replicas", nodes("a1@a", "a2@a", "b1@b", "b2@b"), nil, nil, 3, []string{"a1", "a2", "b1"}},
		{"a node short of disk is skipped", nodes("n1!", "n2", "n3", "n4"), nil, nil, 3, []string{"n2", "n3", "n4"}},
		{"short of disk and not enough others", nodes("n1!", "n2"), nil, nil, 3, []string{"n2"}},
		{"current kept, lost replaced", nodes("n1", "n2", "n4", "n5"), []*Group{grp("g1", "n1", "n2", "n3"), grp("g2", "n4")}, []string{"n1", "n2", "n3"}, 3, []string{"n1", "n2", "n5"}},
		{"current kept when disk is low", nodes("n1!", "n2", "n3"), nil, []string{"n1"}, 2, []string{"n1", "n2"}},
		{"grow to the setting", nodes("n1", "n2", "n3"), []*Group{grp("g1", "n1")}, []string{"n1"}, 3, []string{"n1", "n2", "n3"}},
		{"too many current: first by id", nodes("n1", "n2", "n3"), nil, []string{"n3", "n2", "n1"}, 2, []string{"n1", "n2"}},
		{"no nodes", nil, nil, nil, 3, []string{}},
		{"duplicates in input", nodes("n1", "n1", "n2"), nil, []string{"n2", "n2"}, 3, []string{"n1", "n2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseReplicas(tc.nodes, tc.groups, tc.current, tc.n)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ChooseReplicas = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestChooseReplicasProperties: for random nodes, zones, disks and
// groups, the answer is distinct, sorted, only nodes, never adds a node
// short of disk, has min(n, usable nodes) replicas, spans as many zones
// as it can, and is a fixed point (called again with itself as current,
// it changes nothing).
func TestChooseReplicasProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 1))
	for iter := range 2000 {
		var ns []Node
		for i := range 1 + r.IntN(9) {
			ns = append(ns, Node{ID: fmt.Sprintf("n%d", i), Zone: []string{"", "a", "b", "c"}[r.IntN(4)], DiskLow: r.IntN(6) == 0})
		}
		var gs []*Group
		for i := range r.IntN(5) {
			var reps []string
			for _, nd := range ns {
				if r.IntN(2) == 0 {
					reps = append(reps, nd.ID)
				}
			}
			gs = append(gs, grp(fmt.Sprintf("g%d", i), reps...))
		}
		n := 1 + r.IntN(5)
		var cur []string
		if len(gs) > 0 && r.IntN(2) == 0 {
			cur = append(slices.Clone(gs[0].Replicas), "gone")
		}
		got := ChooseReplicas(ns, gs, cur, n)
		byID := map[string]Node{}
		usable, zones := 0, map[string]bool{}
		for _, nd := range ns {
			byID[nd.ID] = nd
			if !nd.DiskLow || slices.Contains(cur, nd.ID) {
				usable++
				zones[nd.Zone] = true
			}
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("iter %d: %v not sorted and distinct", iter, got)
		}
		if len(got) != min(n, usable) {
			t.Fatalf("iter %d: %d replicas of %d asked, %d usable nodes: %v", iter, len(got), n, usable, got)
		}
		gotZones := map[string]bool{}
		for _, id := range got {
			nd, ok := byID[id]
			if !ok {
				t.Fatalf("iter %d: %s is not a node", iter, id)
			}
			if nd.DiskLow && !slices.Contains(cur, id) {
				t.Fatalf("iter %d: added %s, short of disk", iter, id)
			}
			gotZones[nd.Zone] = true
		}
		if cur == nil && len(gotZones) != min(len(got), len(zones)) {
			t.Fatalf("iter %d: %v spans %d zones of %d", iter, got, len(gotZones), len(zones))
		}
		if again := ChooseReplicas(ns, gs, got, n); !slices.Equal(again, got) {
			t.Fatalf("iter %d: not a fixed point: %v then %v", iter, got, again)
		}
	}
}

func TestChooseGroup(t *testing.T) {
	groups := []*Group{grp("g2"), grp("data"), grp("g1")}
	load := map[string]int{"data": 5, "g1": 2, "g2": 2}
	for _, tc := range []struct {
		name      string
		load      map[string]int
		requested string
		bound     []Placement
		want      string
		err       error
	}{
		{"least loaded, ties by id", load, "", nil, "g1", nil},
		{"a group with nothing placed", map[string]int{"data": 1, "g1": 1}, "", nil, "g2", nil},
		{"the one named", load, "data", nil, "data", nil},
		{"named and unknown", load, "g9", nil, "", ErrNotFound},
		{"the dead-letter queue's group", load, "", []Placement{{Queue: "jobs.dlq", Group: "data"}}, "data", nil},
		{"named, the same as the dead-letter queue's", load, "g2", []Placement{{Queue: "jobs.dlq", Group: "g2"}}, "g2", nil},
		{"named, not the dead-letter queue's", load, "g1", []Placement{{Queue: "jobs.dlq", Group: "g2"}}, "", ErrConflict},
		{"bound on two groups", load, "", []Placement{{Queue: "a", Group: "g1"}, {Queue: "b", Group: "g2"}}, "", ErrConflict},
		{"bound twice on one", load, "", []Placement{{Queue: "a", Group: "g2"}, {Queue: "b", Group: "g2"}}, "g2", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseGroup(groups, tc.load, tc.requested, tc.bound)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("ChooseGroup = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if _, err := ChooseGroup(nil, nil, "", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no groups: %v", err)
	}
}

func TestPlanLeaders(t *testing.T) {
	all := func(ids ...string) []*Group {
		var out []*Group
		for _, id := range ids {
			out = append(out, grp(id, "n1", "n2", "n3"))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		groups  []*Group
		leaders map[string]string
		nodes   []string
		want    []Transfer
	}{
		{"balanced: nothing", all("a", "b", "c"), map[string]string{"a": "n1", "b": "n2", "c": "n3"}, []string{"n1", "n2", "n3"}, nil},
		{"uneven within the bound: nothing (hysteresis)", all("a", "b", "c", "d"), map[string]string{"a": "n1", "b": "n1", "c": "n2", "d": "n2"}, []string{"n1", "n2", "n3"}, nil},
		{"all on one", all("a", "b", "c"), map[string]string{"a": "n1", "b": "n1", "c": "n1"}, []string{"n1", "n2", "n3"},
			[]Transfer{{"a", "n1", "n2"}, {"b", "n1", "n3"}}},
		{"only to a replica", []*Group{grp("a", "n1", "n2"), grp("b", "n1", "n2")}, map[string]string{"a": "n1", "b": "n1"}, []string{"n1", "n2", "n3"},
			[]Transfer{{"a", "n1", "n2"}}},
		{"only to a live node", all("a", "b", "c"), map[string]string{"a": "n1", "b": "n1", "c": "n1"}, []string{"n1", "n2"},
			[]Transfer{{"a", "n1", "n2"}}},
		{"no replica can take it", []*Group{grp("a", "n1"), grp("b", "n1")}, map[string]string{"a": "n1", "b": "n1"}, []string{"n1", "n2"}, nil},
		{"unknown leader left alone", all("a", "b", "c", "d"), map[string]string{"a": "n1", "b": "n1", "c": "n1"}, []string{"n1", "n2"},
			[]Transfer{{"a", "n1", "n2"}}},
		{"no nodes", all("a"), map[string]string{"a": "n1"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanLeaders(tc.groups, tc.leaders, tc.nodes); !slices.Equal(got, tc.want) {
				t.Fatalf("PlanLeaders = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlanLeadersProperties: with every group replicated on every live
// node, the plan moves each group at most once, only from a node over
// the bound, and leaves every node within it; planned again after it
// applies, nothing more moves.
func TestPlanLeadersProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 2))
	for iter := range 2000 {
		var ns []string
		for i := range 1 + r.IntN(7) {
			ns = append(ns, fmt.Sprintf("n%d", i))
		}
		var gs []*Group
		leaders := map[string]string{}
		for i := range r.IntN(20) {
			g := grp(fmt.Sprintf("g%02d", i), ns...)
			gs = append(gs, g)
			leaders[g.ID] = ns[r.IntN(min(len(ns), 1+r.IntN(3)))] // skewed to the first nodes
		}
		bound := LeaderBound(len(gs), len(ns))
		before := map[string]int{}
		for _, l := range leaders {
			before[l]++
		}
		plan := PlanLeaders(gs, leaders, ns)
		seen := map[string]bool{}
		for _, tr := range plan {
			if seen[tr.Group] {
				t.Fatalf("iter %d: %s moves twice: %v", iter, tr.Group, plan)
			}
			seen[tr.Group] = true
			if before[tr.From] <= bound || leaders[tr.Group] != tr.From {
				t.Fatalf("iter %d: moves %v from a node within the bound %d (%v)", iter, tr, bound, before)
			}
			leaders[tr.Group] = tr.To
		}
		after := map[string]int{}
		for _, l := range leaders {
			after[l]++
		}
		for n, c := range after {
			if c > bound {
				t.Fatalf("iter %d: %s leads %d > %d after %v", iter, n, c, bound, plan)
			}
		}
		if again := PlanLeaders(gs, leaders, ns); len(again) != 0 {
			t.Fatalf("iter %d: a second plan moves %v", iter, again)
		}
	}
}

func TestGroupAndReplicaCounts(t *testing.T) {
	if GroupCount(0) != 1 || GroupCount(4) != 4 {
		t.Fatal("GroupCount")
	}
	if ReplicaCount(0, 2) != 2 || ReplicaCount(0, 5) != 3 || ReplicaCount(5, 9) != 5 || ReplicaCount(5, 4) != 4 {
		t.Fatal("ReplicaCount")
	}
}
