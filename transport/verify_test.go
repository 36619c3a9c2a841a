package transport

import (
	"slices"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestVerifyWithANodeDown: consistent means every voter answered with the
// same digest, so a voter that cannot answer makes Verify say not
// consistent, naming it (issue 11, item 8).
func TestVerifyWithANodeDown(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.leader()
	mustCreate(t, l, "q", nil)
	mustEnqueue(t, l, "q", []byte("x"))
	testVerify(t, c)

	// A follower's API goes down; it stays a voter in the configuration.
	down := c.followers()[0]
	ctx := tctx(t, 10*time.Second)
	down.srv.Stop(ctx)
	v, err := l.admin.Verify(tctx(t, 20*time.Second), &raftqv1.VerifyRequest{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if v.Consistent {
		t.Fatalf("Verify with voter %s down says consistent: %v", down.id, v)
	}
	if len(v.InconsistentIds) != 1 || v.InconsistentIds[0] != down.id {
		t.Fatalf("inconsistent_ids = %v, want [%s]", v.InconsistentIds, down.id)
	}
	for _, nd := range v.Nodes {
		if (nd.Id == down.id) != (nd.Error != "") {
			t.Fatalf("node %s: error %q", nd.Id, nd.Error)
		}
	}
}

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
