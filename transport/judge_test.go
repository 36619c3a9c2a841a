package transport

import (
	"slices"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func TestJudgeDigests(t *testing.T) {
	ok := func(id, digest string) *raftqv1.NodeDigest {
		return &raftqv1.NodeDigest{Id: id, Digest: digest, CountersOk: true}
	}
	down := func(id string) *raftqv1.NodeDigest { return &raftqv1.NodeDigest{Id: id, Error: "unreachable"} }
	three := map[string]bool{"a": true, "b": true, "c": true}
	for _, tc := range []struct {
		name       string
		nodes      []*raftqv1.NodeDigest
		voters     map[string]bool
		leader     string
		consistent bool
		bad        []string
	}{
		{"all agree", []*raftqv1.NodeDigest{ok("a", "x"), ok("b", "x"), ok("c", "x")}, three, "a", true, nil},
		{"a voter down", []*raftqv1.NodeDigest{ok("a", "x"), down("b"), ok("c", "x")}, three, "a", false, []string{"b"}},
		{"a non-voter down", []*raftqv1.NodeDigest{ok("a", "x"), ok("b", "x"), down("d")}, map[string]bool{"a": true, "b": true}, "a", true, nil},
		{"a non-voter differs", []*raftqv1.NodeDigest{ok("a", "x"), ok("b", "x"), ok("d", "y")}, map[string]bool{"a": true, "b": true}, "a", false, []string{"d"}},
		{"the first node differs", []*raftqv1.NodeDigest{ok("a", "y"), ok("b", "x"), ok("c", "x")}, three, "b", false, []string{"a"}},
		{"the leader is outvoted", []*raftqv1.NodeDigest{ok("a", "y"), ok("b", "x"), ok("c", "x")}, three, "a", false, []string{"a"}},
		{"a tie goes to the leader", []*raftqv1.NodeDigest{ok("a", "y"), ok("b", "x")}, map[string]bool{"a": true, "b": true}, "b", false, []string{"a"}},
		{"counters off", []*raftqv1.NodeDigest{ok("a", "x"), {Id: "b", Digest: "x", Error: "counter drift"}, ok("c", "x")}, three, "a", false, []string{"b"}},
		{"nobody answered", []*raftqv1.NodeDigest{down("a")}, map[string]bool{}, "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			consistent, bad := judgeDigests(tc.nodes, tc.voters, tc.leader)
			if consistent != tc.consistent || !slices.Equal(bad, tc.bad) {
				t.Fatalf("judgeDigests = %t, %v; want %t, %v", consistent, bad, tc.consistent, tc.bad)
			}
		})
	}
}
