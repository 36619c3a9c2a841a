package test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// containerStopTimeout is what docker stop and docker-compose stop give a
// container between SIGTERM and SIGKILL by default.
const containerStopTimeout = 10 * time.Second

// TestStopStaysAVoterAndLeavingIsExplicit: SIGTERM stops a node within a
// container's stop timeout without shrinking the cluster, so a rolling
// restart under load keeps three voters throughout and loses nothing;
// leaving is explicit: `raftq cluster leave` (refused below
// --bootstrap-expect unless --force) and --leave-on-terminate.
func TestStopStaysAVoterAndLeavingIsExplicit(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	nodes, c := startCluster(t, 3)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "roll", &raftqv1.QueueConfig{VisibilityTimeoutMs: 20_000}); err != nil {
		t.Fatal(err)
	}
	w := newWorkload(c, "roll")
	runCtx, stop := context.WithCancel(context.Background())
	prodCtx, stopProducers := context.WithCancel(runCtx)
	var wg, producers sync.WaitGroup
	for p := range 2 {
		producers.Go(func() { w.produce(prodCtx, p) })
	}
	con := client.NewConsumer(c, "roll", w.handle, client.ConsumerOptions{Name: "roller", MaxInFlight: 16})
	var consumerErr error
	wg.Go(func() { consumerErr = con.Run(runCtx) })
	defer func() { stop(); producers.Wait(); wg.Wait() }()
	progress := func(n int64) {
		t.Helper()
		from := w.enqueued.Load()
		harness.Eventually(t, 60*time.Second, func() error {
			if got := w.enqueued.Load() - from; got < n {
				return fmt.Errorf("%d enqueues acknowledged, want %d (last error: %v)", got, n, w.lastErr.Load())
			}
			return nil
		})
	}
	progress(100)

	// A rolling restart, the leader first: each node stops within the
	// container stop timeout and stays a voter while it is down.
	order := []*harness.Node{leaderOf(t, nodes)}
	for _, n := range nodes {
		if n != order[0] {
			order = append(order, n)
		}
	}
	for _, n := range order {
		stops := strings.Count(n.Log(), "msg=stopped")
		began := time.Now()
		if err := n.Stop(containerStopTimeout); err != nil {
			t.Fatalf("SIGTERM %s: %v", n.ID, err)
		}
		took := time.Since(began)
		t.Logf("%s stopped %v after SIGTERM", n.ID, took.Round(time.Millisecond))
		if strings.Count(n.Log(), "msg=stopped") != stops+1 {
			t.Fatalf("%s did not log a clean stop:\n%s", n.ID, n.LogTail(4000))
		}
		var up []*harness.Node
		for _, m := range nodes {
			if m != n {
				up = append(up, m)
			}
		}
		harness.Eventually(t, 60*time.Second, func() error {
			st, err := statusOf(ctx, t, up[0])
			if err != nil {
				return err
			}
			voters, seenDown := 0, false
			for _, nd := range st.Nodes {
				if nd.Suffrage == "voter" {
					voters++
				}
				seenDown = seenDown || (nd.Id == n.ID && nd.State == "unreachable")
			}
			if voters != 3 {
				t.Fatalf("%d voters while %s is stopped, want 3: %v", voters, n.ID, st.Nodes)
			}
			if !seenDown || st.LeaderId == "" || st.LeaderId == n.ID {
				return fmt.Errorf("waiting for %s to be seen down under a new leader: leader %q, %v", n.ID, st.LeaderId, st.Nodes)
			}
			return nil
		})
		progress(50) // writes flow while it is down
		n.Start()
		waitHealthy(t, n, 3)
	}
	progress(50)
	stopProducers()
	producers.Wait()
	harness.Eventually(t, 90*time.Second, func() error {
		if m := w.missing(); len(m) > 0 {
			return fmt.Errorf("%d acknowledged messages not yet consumed (e.g. %s)", len(m), m[0])
		}
		return nil
	})
	stop()
	wg.Wait()
	if consumerErr != nil {
		t.Fatalf("consumer: %v", consumerErr)
	}
	if len(w.overlap) > 0 {
		t.Fatalf("messages held by two consumers at once: %v", w.overlap)
	}
	verifyConsistent(t, c, 3)

	// `raftq cluster leave` against one node: refused below
	// bootstrap-expect (3) without --force, and nothing changes.
	leaver := order[1]
	out, err := raftqCLI(ctx, leaver, "cluster", "leave")
	if err == nil || !strings.Contains(out, "FailedPrecondition") || !strings.Contains(out, "bootstrap-expect") {
		t.Fatalf("leave below bootstrap-expect without --force: %v\n%s", err, out)
	}
	if !leaver.Running() {
		t.Fatal("a refused leave stopped the node")
	}
	waitVoters(t, c, nodes[0], 3)
	out, err = raftqCLI(ctx, leaver, "cluster", "leave", "--force")
	if err != nil || !strings.Contains(out, "node "+leaver.ID+" left the cluster") {
		t.Fatalf("cluster leave --force: %v\n%s", err, out)
	}
	harness.Eventually(t, containerStopTimeout, func() error {
		if leaver.Running() {
			return fmt.Errorf("%s still running after it left", leaver.ID)
		}
		return nil
	})
	waitVoters(t, c, nodes[0], 2)

	// --leave-on-terminate: restarted with it, the node is a voter again;
	// SIGTERM takes it out.
	leaver.Args = append(leaver.Args, "--leave-on-terminate")
	leaver.Start()
	waitVoters(t, c, nodes[0], 3)
	if err := leaver.Stop(containerStopTimeout); err != nil {
		t.Fatalf("SIGTERM with --leave-on-terminate: %v", err)
	}
	waitVoters(t, c, nodes[0], 2)
}

// waitHealthy waits until n sees want healthy voters, itself among them.
func waitHealthy(t *testing.T, n *harness.Node, want int) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := statusOf(ctx, t, n)
		if err != nil {
			return err
		}
		healthy := 0
		for _, nd := range st.Nodes {
			if nd.Suffrage == "voter" && nd.Healthy {
				healthy++
			}
		}
		if healthy != want || st.LeaderId == "" {
			return fmt.Errorf("%s sees %d healthy voters, want %d (leader %q): %v", n.ID, healthy, want, st.LeaderId, st.Nodes)
		}
		return nil
	})
}

// raftqCLI runs one client command against n and returns its combined
// output.
func raftqCLI(ctx context.Context, n *harness.Node, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, binary, append([]string{"--addr", n.GRPC}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
