package transport_test

import (
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestVerifyWithANodeDown: consistent means every voter answered with the
// same digest, so a voter that cannot answer makes Verify say not
// consistent, naming it (issue 11, item 8).
func TestVerifyWithANodeDown(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.Leader()
	mustCreate(t, l, "q", nil)
	mustEnqueue(t, l, "q", []byte("x"))
	testVerify(t, c)

	// A follower's API goes down; it stays a voter in the configuration.
	down := c.Followers()[0]
	ctx := tctx(t, 10*time.Second)
	down.API().Stop(ctx)
	v, err := l.Admin.Verify(tctx(t, 20*time.Second), &raftqv1.VerifyRequest{})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if v.Consistent {
		t.Fatalf("Verify with voter %s down says consistent: %v", down.ID, v)
	}
	if len(v.InconsistentIds) != 1 || v.InconsistentIds[0] != down.ID {
		t.Fatalf("inconsistent_ids = %v, want [%s]", v.InconsistentIds, down.ID)
	}
	for _, nd := range v.Nodes {
		if (nd.Id == down.ID) != (nd.Error != "") {
			t.Fatalf("node %s: error %q", nd.Id, nd.Error)
		}
	}
}
