package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// TestGrowSingleNode, as docs/operations.md says and as issue 20 found:
// a node started with the defaults (no --join, --bootstrap-expect 1)
// admits nodes started to found a cluster of their own (make cluster's,
// --bootstrap-expect 3, whose --join reached its gossip port) never, and
// lists them as not admitted; a node started with --join naming it joins
// and becomes a voter, with the same cluster id.
func TestGrowSingleNode(t *testing.T) {
	first, c := startSingle(t)
	ctx := ctxT(t)
	var strangers []*harness.Node
	for _, id := range []string{"d2", "d3"} {
		n := harness.TestNode(t, binary, id, "--join", first.Gossip, "--bootstrap-expect", "3")
		n.Start()
		strangers = append(strangers, n)
	}
	harness.Eventually(t, 60*time.Second, func() error {
		st, err := statusOf(ctx, t, first)
		if err != nil {
			return err
		}
		var refused []string
		for _, r := range st.RefusedMembers {
			if strings.Contains(r.Reason, "presents no cluster id") {
				refused = append(refused, r.Id)
			}
		}
		slices.Sort(refused)
		if !slices.Equal(refused, []string{"d2", "d3"}) {
			return fmt.Errorf("refused %v (%v), want d2 and d3", refused, st.RefusedMembers)
		}
		return nil
	})

	joiner := harness.TestNode(t, binary, "n2", "--join", first.Gossip)
	joiner.Start()
	waitVoters(t, c, first, 2)
	st, err := statusOf(ctx, t, first)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range st.Nodes {
		if nd.Id == "d2" || nd.Id == "d3" {
			t.Fatalf("%s was added: %v", nd.Id, st.Nodes)
		}
	}
	js, err := statusOf(ctx, t, joiner)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterId == "" || js.ClusterId != st.ClusterId {
		t.Fatalf("cluster ids: first %q, joiner %q", st.ClusterId, js.ClusterId)
	}
	if _, err := c.CreateQueue(context.Background(), "grown", nil); err != nil {
		t.Fatalf("the two-node cluster does not commit: %v", err)
	}
}
