package broker

import "testing"

// TestRepairAllowed: a voter is repaired only when the agreeing voters
// stay a majority of the voters that remain without it, and no other node
// is on its way back as a voter.
func TestRepairAllowed(t *testing.T) {
	for _, tc := range []struct {
		name              string
		voters, agreeing  int
		voter, wantRepair bool
		notBack           []string
	}{
		{"3 voters, 1 diverged", 3, 2, true, true, nil},
		{"3 voters, 1 diverged, 1 down", 3, 1, true, false, nil},
		{"5 voters, 2 diverged: the first", 5, 3, true, true, nil},
		{"5 voters, 2 diverged, one already out", 4, 3, true, true, nil},
		{"5 voters, 3 agreeing, 2 down, 1 diverged", 5, 2, true, false, nil},
		{"2 voters, 1 diverged", 2, 1, true, true, nil},
		{"a non-voter always", 3, 1, false, true, nil},
		{"3 voters, a second diverged while the first is away", 2, 1, true, false, []string{"n1 (removed for repair, not rejoined yet)"}},
		{"3 voters, a second diverged while the first catches up", 2, 1, true, false, []string{"n1 (catching up as a nonvoter)"}},
		{"5 voters, a second diverged while the first catches up", 4, 3, true, false, []string{"n1 (catching up as a nonvoter)"}},
		{"a non-voter while another catches up", 3, 3, false, true, []string{"n1 (catching up as a nonvoter)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := repairAllowed(tc.voters, tc.agreeing, tc.voter, tc.notBack)
			if ok != tc.wantRepair {
				t.Fatalf("repairAllowed(%d, %d, %v, %q) = %v (%s), want %v", tc.voters, tc.agreeing, tc.voter, tc.notBack, ok, why, tc.wantRepair)
			}
			if !ok && why == "" {
				t.Fatal("a refusal without a reason")
			}
		})
	}
}

// TestReferenceDigest: the digest most replicas hold, the leader's on a
// tie.
func TestReferenceDigest(t *testing.T) {
	ans := func(ds ...string) []replicaAnswer {
		var out []replicaAnswer
		for _, d := range ds {
			out = append(out, replicaAnswer{digest: d})
		}
		return out
	}
	for _, tc := range []struct {
		answers []replicaAnswer
		own     string
		want    string
	}{
		{ans("a", "a", "b"), "a", "a"},
		{ans("b", "a", "a"), "b", "a"},
		{ans("a", "b"), "a", "a"},
		{ans("b", "a"), "b", "b"},
	} {
		if got := referenceDigest(tc.answers, tc.own); got != tc.want {
			t.Errorf("referenceDigest(%v, %s) = %s, want %s", tc.answers, tc.own, got, tc.want)
		}
	}
}
