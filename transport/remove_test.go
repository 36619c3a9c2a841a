package transport_test

import (
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRemoveNodeKeepsBootstrapExpectVoters: RemoveNode refuses to leave
// fewer voters than --bootstrap-expect unless forced (issue 11, item 8),
// on the leader and forwarded by a follower, and changes nothing when it
// refuses.
func TestRemoveNodeKeepsBootstrapExpectVoters(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3, expect: 2})
	l := c.Leader()
	fs := c.Followers()
	remove := func(via *testcluster.Node, id string, force bool) error {
		_, err := via.Admin.RemoveNode(tctx(t, 10*time.Second), &raftqv1.RemoveNodeRequest{Id: id, Force: force})
		return err
	}
	checkVoters := func(want int) {
		t.Helper()
		if n := voterCount(t, l); n != want {
			t.Fatalf("%d voters, want %d", n, want)
		}
	}

	// 3 voters, bootstrap-expect 2: one may go.
	if err := remove(l, fs[0].ID, false); err != nil {
		t.Fatalf("remove %s leaving 2 voters: %v", fs[0].ID, err)
	}
	checkVoters(2)
	// A second would leave 1.
	for _, via := range []*testcluster.Node{l, fs[1]} {
		if err := remove(via, fs[1].ID, false); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("remove %s leaving 1 voter (bootstrap-expect 2) via %s: %v, want FailedPrecondition", fs[1].ID, via.ID, err)
		}
	}
	checkVoters(2)
	// The operator may insist.
	if err := remove(fs[1], fs[1].ID, true); err != nil {
		t.Fatalf("forced removal of %s: %v", fs[1].ID, err)
	}
	checkVoters(1)
}

func voterCount(t *testing.T, n *testcluster.Node) int {
	t.Helper()
	st, err := n.Admin.Status(tctx(t, 10*time.Second), &raftqv1.StatusRequest{LocalOnly: true})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	voters := 0
	for _, nd := range st.Nodes {
		if nd.Suffrage == "voter" {
			voters++
		}
	}
	return voters
}
