package transport

import "testing"

// TestRepairAllowed: a voter is repaired only when the agreeing voters
// stay a majority of the voters that remain without it.
func TestRepairAllowed(t *testing.T) {
	for _, tc := range []struct {
		name              string
		voters, agreeing  int
		voter, wantRepair bool
	}{
		{"3 voters, 1 diverged", 3, 2, true, true},
		{"3 voters, 1 diverged, 1 down", 3, 1, true, false},
		{"5 voters, 2 diverged: the first", 5, 3, true, true},
		{"5 voters, 2 diverged, one already out", 4, 3, true, true},
		{"5 voters, 3 agreeing, 2 down, 1 diverged", 5, 2, true, false},
		{"2 voters, 1 diverged", 2, 1, true, true},
		{"a non-voter always", 3, 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := repairAllowed(tc.voters, tc.agreeing, tc.voter)
			if ok != tc.wantRepair {
				t.Fatalf("repairAllowed(%d, %d, %v) = %v (%s), want %v", tc.voters, tc.agreeing, tc.voter, ok, why, tc.wantRepair)
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
