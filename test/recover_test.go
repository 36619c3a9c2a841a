package test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// recoverCLI runs `raftq cluster recover` and returns its stdout, stderr
// and error.
func recoverCLI(ctx context.Context, args ...string) (string, string, error) {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, binary, append([]string{"cluster", "recover"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestRecoverLostQuorum: a three-node cluster loses two nodes for good;
// the survivor (stopped) is recovered with `raftq cluster recover`, which
// refuses while it runs and names what may be lost; started again it
// elects itself and serves every acknowledged message it held, from its
// snapshot and from its log after it.
func TestRecoverLostQuorum(t *testing.T) {
	nodes, c := startCluster(t, 3)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "keep", nil); err != nil {
		t.Fatal(err)
	}
	var acked []string
	enqueue := func(from int) {
		t.Helper()
		var payloads [][]byte
		for i := range 40 {
			payloads = append(payloads, fmt.Appendf(nil, "m%d", from+i))
		}
		ids, err := c.EnqueuePayloads(ctx, "keep", payloads...)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, ids...)
	}
	enqueue(0)
	if _, err := c.Snapshot(ctx); err != nil { // some of the state comes back from a snapshot
		t.Fatal(err)
	}
	enqueue(40)

	leader := leaderOf(t, nodes)
	survivor := nodes[0]
	if survivor == leader {
		survivor = nodes[1]
	}
	// The survivor holds every acknowledged entry (a follower may lag).
	st, err := statusOf(ctx, t, leader)
	if err != nil {
		t.Fatal(err)
	}
	target := st.CommitIndex
	harness.Eventually(t, 30*time.Second, func() error {
		st, err := statusOf(ctx, t, survivor)
		if err != nil {
			return err
		}
		if st.AppliedIndex < target {
			return fmt.Errorf("%s applied %d, want %d", survivor.ID, st.AppliedIndex, target)
		}
		return nil
	})

	// Refused while the node runs: its data dir is locked.
	if _, errOut, err := recoverCLI(ctx, "--data-dir", survivor.DataDir, "--voters", survivor.ID, "--force"); err == nil || !strings.Contains(errOut, "in use") {
		t.Fatalf("recover of a running node: %v\n%s", err, errOut)
	}

	for _, n := range nodes {
		if n != survivor {
			n.Kill() // for good
		}
	}
	if err := survivor.Stop(harness.StopTimeout); err != nil {
		t.Fatal(err)
	}

	// A voter not in the configuration, or a list without this node, is
	// refused and changes nothing; a dry run shows the last index.
	for _, bad := range []struct{ voters, want string }{
		{"n9", "not a server"},
		{otherThan(nodes, survivor).ID, "not among the voters"},
	} {
		if _, errOut, err := recoverCLI(ctx, "--data-dir", survivor.DataDir, "--voters", bad.voters, "--force"); err == nil || !strings.Contains(errOut, bad.want) {
			t.Fatalf("recover --voters %s: %v\n%s", bad.voters, err, errOut)
		}
	}
	out, errOut, err := recoverCLI(ctx, "--data-dir", survivor.DataDir, "--voters", survivor.ID, "--dry-run")
	if err != nil || !strings.Contains(out, "dry run") || !strings.Contains(errOut, "WARNING") {
		t.Fatalf("dry run: %v\n%s\n%s", err, out, errOut)
	}

	out, errOut, err = recoverCLI(ctx, "--data-dir", survivor.DataDir, "--voters", survivor.ID, "--force")
	if err != nil {
		t.Fatalf("recover: %v\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{"WARNING", "acknowledged", "becomes committed"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("the warning does not say %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "recovered node "+survivor.ID) {
		t.Fatalf("recover printed:\n%s", out)
	}

	survivor.Start()
	sc := harness.Dial(t, survivor)
	if err := harness.WaitReady(ctx, sc); err != nil {
		t.Fatalf("the recovered node does not serve: %v\n%s", err, survivor.LogTail(4000))
	}
	harness.Eventually(t, 30*time.Second, func() error {
		st, err := statusOf(ctx, t, survivor)
		if err != nil {
			return err
		}
		if st.LeaderId != survivor.ID || len(st.Nodes) != 1 {
			return fmt.Errorf("leader %q, servers %v; want %s alone", st.LeaderId, st.Nodes, survivor.ID)
		}
		return nil
	})
	msgs, err := sc.Peek(ctx, "keep", 1000, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.GetId())
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(acked))
	if !slices.Equal(got, want) {
		t.Fatalf("after recovery the queue holds %d messages, want the %d acknowledged ones", len(got), len(want))
	}
	if _, err := sc.EnqueuePayloads(ctx, "keep", []byte("after")); err != nil {
		t.Fatalf("enqueue after recovery: %v", err)
	}
}

// otherThan returns a node of nodes that is not n.
func otherThan(nodes []*harness.Node, n *harness.Node) *harness.Node {
	for _, m := range nodes {
		if m != n {
			return m
		}
	}
	return nil
}
