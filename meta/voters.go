package meta

import (
	"slices"
	"strings"
)

// VoterCount is how many meta voters a cluster of members nodes has under
// the setting meta_voters: the setting (0 = automatic: 3, or 5 once
// there are 5 members), never more than the members.
func VoterCount(setting uint32, members int) int {
	n := int(setting)
	if n == 0 {
		n = autoVoters
		if members >= autoVotersAt {
			n = autoVotersBig
		}
	}
	return min(n, members)
}

// MetaVoters chooses the meta voters among members: the current voters
// that are still members are kept (the first by node id when there are
// too many), then members are added, each from a zone with the fewest
// chosen voters so far, then by node id. A reconciler that calls it with
// what it chose last moves no voter needlessly. The answer is sorted.
func MetaVoters(current []string, members []Member, setting uint32) []string {
	n := VoterCount(setting, len(members))
	byID := map[string]Member{}
	for _, m := range members {
		byID[m.NodeID] = m
	}
	cur := slices.Clone(current)
	slices.Sort(cur)
	cur = slices.Compact(cur)
	chosen := []string{}
	zones := map[string]int{}
	for _, id := range cur {
		if m, ok := byID[id]; ok && len(chosen) < n {
			chosen = append(chosen, id)
			zones[m.Zone]++
		}
	}
	rest := slices.Clone(members)
	slices.SortFunc(rest, func(a, b Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	for len(chosen) < n {
		best := -1
		for i, m := range rest {
			if slices.Contains(chosen, m.NodeID) {
				continue
			}
			if best < 0 || zones[m.Zone] < zones[rest[best].Zone] {
				best = i
			}
		}
		if best < 0 {
			break
		}
		chosen = append(chosen, rest[best].NodeID)
		zones[rest[best].Zone]++
	}
	slices.Sort(chosen)
	return chosen
}
