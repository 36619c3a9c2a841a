package meta

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
	// ChooseReplicas with no groups is exactly this rule: no load to
	// weigh and no disk known, so zone, then id.
	nodes := make([]Node, 0, len(members))
	for _, m := range members {
		nodes = append(nodes, Node{ID: m.NodeID, Zone: m.Zone})
	}
	return ChooseReplicas(nodes, nil, current, VoterCount(setting, len(members)))
}
