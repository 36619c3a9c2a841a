package test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// startCluster starts n nodes that find each other through --join and
// bootstrap together.
func startCluster(t *testing.T, n int, extra ...string) ([]*harness.Node, *client.Client) {
	t.Helper()
	nodes := make([]*harness.Node, n)
	for i := range nodes {
		nodes[i] = harness.TestNode(t, binary, fmt.Sprintf("n%d", i+1))
	}
	flags := append(harness.JoinFlags(nodes), "--lease-grace", "2s")
	for _, nd := range nodes {
		nd.Args = append(append(nd.Args, flags...), extra...)
		nd.Start()
	}
	c := harness.Dial(t, nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, c, nodes[0], n)
	return nodes, c
}

// statusOf asks one node for its own view.
func statusOf(ctx context.Context, t testing.TB, n *harness.Node) (*raftqv1.StatusResponse, error) {
	return raftqv1.NewClusterClient(rawConn(t, n)).Status(ctx, &raftqv1.StatusRequest{})
}

func waitVoters(t testing.TB, c *client.Client, via *harness.Node, want int) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		voters := 0
		for _, nd := range st.Nodes {
			if nd.Suffrage == "voter" {
				voters++
			}
		}
		if voters != want {
			return fmt.Errorf("%d voters, want %d (%v)", voters, want, st.Nodes)
		}
		return nil
	})
}

// leaderOf returns the node that a live node names as leader.
func leaderOf(t testing.TB, nodes []*harness.Node) *harness.Node {
	t.Helper()
	var leader *harness.Node
	harness.Eventually(t, 60*time.Second, func() error {
		for _, n := range nodes {
			if !n.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := statusOf(ctx, t, n)
			cancel()
			if err != nil || st.LeaderId == "" {
				continue
			}
			for _, m := range nodes {
				if m.ID == st.LeaderId && m.Running() {
					leader = m
					return nil
				}
			}
		}
		return errors.New("no live leader")
	})
	return leader
}

func verifyConsistent(t *testing.T, c *client.Client, wantNodes int) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		v, err := c.Verify(ctx)
		if err != nil {
			return err
		}
		if len(v.Nodes) != wantNodes || !v.Consistent {
			return fmt.Errorf("verify: consistent=%v nodes=%v", v.Consistent, v.Nodes)
		}
		for _, nd := range v.Nodes {
			if nd.Digest == "" || !nd.CountersOk {
				return fmt.Errorf("node %s: %v", nd.Id, nd)
			}
		}
		return nil
	})
}

// workload runs producers and consumers against a cluster and records
// what was acknowledged, delivered and held.
type workload struct {
	c     *client.Client
	queue string

	mu        sync.Mutex
	acked     map[string]bool // payloads whose enqueue was acknowledged
	processed map[string]int  // payload -> successful handler runs
	holding   map[string]bool // message id -> a handler holds it now
	overlap   []string        // message ids held by two handlers at once
	enqueued  atomic.Int64
	lastErr   atomic.Value
}

func newWorkload(c *client.Client, queue string) *workload {
	return &workload{c: c, queue: queue, acked: map[string]bool{}, processed: map[string]int{}, holding: map[string]bool{}}
}

// runningWorkload is a workload driven by two producers and some
// consumers until the test stops them (or its cleanup does).
type runningWorkload struct {
	*workload
	stopRun, stopProd    context.CancelFunc
	producers, consumers sync.WaitGroup
	consumerErr          atomic.Value
}

func startWorkload(t *testing.T, c *client.Client, queue string, consumers int) *runningWorkload {
	r := &runningWorkload{workload: newWorkload(c, queue)}
	runCtx, stop := context.WithCancel(context.Background())
	prodCtx, stopProd := context.WithCancel(runCtx)
	r.stopRun, r.stopProd = stop, stopProd
	for p := range 2 {
		r.producers.Go(func() { r.produce(prodCtx, p) })
	}
	for i := range consumers {
		con := client.NewConsumer(c, queue, r.handle, client.ConsumerOptions{Name: fmt.Sprint("c", i), MaxInFlight: 16})
		r.consumers.Go(func() {
			if err := con.Run(runCtx); err != nil {
				r.consumerErr.Store(err.Error())
			}
		})
	}
	t.Cleanup(func() { stop(); r.producers.Wait(); r.consumers.Wait() })
	return r
}

func (r *runningWorkload) stopProducers() { r.stopProd(); r.producers.Wait() }
func (r *runningWorkload) stopConsumers() { r.stopRun(); r.consumers.Wait() }

// consumersOK fails the test if a consumer gave up.
func (r *runningWorkload) consumersOK(t *testing.T) {
	t.Helper()
	if err := r.consumerErr.Load(); err != nil {
		t.Fatalf("consumer stopped: %v", err)
	}
}

func (w *workload) produce(ctx context.Context, id int) {
	for i := 0; ctx.Err() == nil; i++ {
		payload := fmt.Sprintf("p%d-%d", id, i)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := w.c.Enqueue(cctx, w.queue, &raftqv1.EnqueueMessage{Payload: []byte(payload)})
		cancel()
		if err != nil {
			w.lastErr.Store(err.Error()) // a string: atomic.Value needs one concrete type
			continue                     // outcome unknown: the client's dedup id made the retry safe
		}
		w.mu.Lock()
		w.acked[payload] = true
		w.mu.Unlock()
		w.enqueued.Add(1)
	}
}

func (w *workload) handle(_ context.Context, d *raftqv1.Delivery) error {
	w.mu.Lock()
	if w.holding[d.Id] {
		w.overlap = append(w.overlap, d.Id)
	}
	w.holding[d.Id] = true
	w.mu.Unlock()
	time.Sleep(time.Millisecond) // simulated work, so overlapping holds would be seen
	w.mu.Lock()
	delete(w.holding, d.Id)
	w.processed[string(d.Payload)]++
	w.mu.Unlock()
	return nil
}

func (w *workload) missing() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for p := range w.acked {
		if w.processed[p] == 0 {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// TestThreeNodeFailover: kill -9 the leader under load. A new leader is
// elected, every acknowledged enqueue is consumed, consumers resume on
// their own, no message is held twice at once, and replicas agree.
func TestThreeNodeFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process failover")
	}
	nodes, c := startCluster(t, 3)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "ha", &raftqv1.QueueConfig{VisibilityTimeoutMs: 20_000}); err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, c, "ha", 2)
	// A consumer gives up only on errors retrying cannot fix; none may occur.
	consumersOK := func() { t.Helper(); w.consumersOK(t) }

	harness.Eventually(t, 60*time.Second, func() error {
		if n := w.enqueued.Load(); n < 200 {
			return fmt.Errorf("%d enqueued", n)
		}
		return nil
	})
	leader := leaderOf(t, nodes)
	before := w.enqueued.Load()
	killedAt := time.Now()
	leader.Kill()
	t.Logf("killed leader %s after %d acknowledged enqueues (last enqueue error before: %v)", leader.ID, before, w.lastErr.Load())
	harness.Eventually(t, 60*time.Second, func() error {
		if n := w.enqueued.Load(); n <= before {
			return fmt.Errorf("no enqueue acknowledged since the kill (last error: %v)", w.lastErr.Load())
		}
		return nil
	})
	t.Logf("first acknowledged enqueue %v after kill -9 of the leader", time.Since(killedAt).Round(time.Millisecond))
	newLeader := leaderOf(t, nodes)
	if newLeader == leader {
		t.Fatal("the killed node is still named leader")
	}
	harness.Eventually(t, 60*time.Second, func() error {
		if n := w.enqueued.Load(); n < before+200 {
			return fmt.Errorf("%d enqueued since the kill", n-before)
		}
		return nil
	})
	w.stopProducers()
	consumersOK()
	harness.Eventually(t, 90*time.Second, func() error {
		consumersOK()
		if m := w.missing(); len(m) > 0 {
			qi, err := c.GetQueue(ctx, "ha", false)
			return fmt.Errorf("%d acknowledged messages not yet consumed (e.g. %s); queue %v %v", len(m), m[0], qi.GetStats(), err)
		}
		return nil
	})
	w.stopConsumers()
	consumersOK()
	if len(w.overlap) > 0 {
		t.Fatalf("messages held by two consumers at once: %v", w.overlap)
	}
	leader.Start()
	verifyConsistent(t, c, 3)
}

// TestWritesThroughFollower: a follower forwards writes to the leader and
// redirects Lease streams there. (Stopping and leaving:
// TestStopStaysAVoterAndLeavingIsExplicit.)
func TestWritesThroughFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	nodes, _ := startCluster(t, 3)
	ctx := ctxT(t)
	leader := leaderOf(t, nodes)
	var follower *harness.Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	fc := raftqv1.NewBrokerClient(rawConn(t, follower))
	if _, err := fc.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "fwd"}); err != nil {
		t.Fatalf("create through follower: %v", err)
	}
	res, err := fc.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("via follower")}}})
	if err != nil || len(res.MessageIds) != 1 {
		t.Fatalf("enqueue through follower: %v %v", res, err)
	}
	// A Lease stream on a follower is redirected, naming the leader.
	s, err := fc.Lease(ctx, &raftqv1.LeaseRequest{Queue: "fwd"})
	if err == nil {
		_, err = s.Recv()
	}
	if got := redirectLeader(err); got != leader.GRPC {
		t.Fatalf("lease on follower: %v (redirect to %q, want %q)", err, got, leader.GRPC)
	}
}

// TestFiveNodesSurviveTwoLosses: with two of five nodes killed (one the
// leader) the cluster still accepts and delivers work.
func TestFiveNodesSurviveTwoLosses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	nodes, c := startCluster(t, 5)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "five", nil); err != nil {
		t.Fatal(err)
	}
	ids, err := c.EnqueuePayloads(ctx, "five", []byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, nodes)
	leader.Kill()
	for _, n := range nodes {
		if n != leader {
			n.Kill()
			break
		}
	}
	var live []*harness.Node
	for _, n := range nodes {
		if n.Running() {
			live = append(live, n)
		}
	}
	lc := harness.Dial(t, live...)
	if _, err := lc.EnqueuePayloads(ctx, "five", []byte("after")); err != nil {
		t.Fatalf("enqueue with two of five down: %v", err)
	}
	got := map[string]bool{}
	con := client.NewConsumer(lc, "five", func(_ context.Context, d *raftqv1.Delivery) error {
		got[string(d.Payload)] = true
		return nil
	}, client.ConsumerOptions{Concurrency: 1})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- con.Run(cctx) }()
	harness.Eventually(t, 60*time.Second, func() error {
		qi, err := lc.GetQueue(ctx, "five", false)
		if err != nil {
			return err
		}
		if qi.Stats.AckedTotal != 2 {
			return fmt.Errorf("acked %d of 2", qi.Stats.AckedTotal)
		}
		return nil
	})
	cancel()
	<-done
	if !got["before"] || !got["after"] {
		t.Fatalf("consumed %v (first id %s)", got, ids[0])
	}
}

// TestRestartedNodeCatchesUpFromSnapshot: a follower that was down while
// the log was compacted comes back through a snapshot install and agrees
// with the others.
func TestRestartedNodeCatchesUpFromSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	nodes, c := startCluster(t, 3, "--snapshot-threshold", "64", "--trailing-logs", "16")
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "snap", nil); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, nodes)
	var down *harness.Node
	for _, n := range nodes {
		if n != leader {
			down = n
			break
		}
	}
	down.Kill()
	for i := range 300 {
		if _, err := c.EnqueuePayloads(ctx, "snap", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raftqv1.NewClusterClient(rawConn(t, leader)).Snapshot(ctx, &raftqv1.SnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	down.Start()
	// Equal digests at one index on all three nodes: the restarted node
	// holds the same 300 messages as the others.
	verifyConsistent(t, c, 3)
	qi, err := c.GetQueue(ctx, "snap", false)
	if err != nil || qi.Stats.Ready != 300 {
		t.Fatalf("queue after catch-up: %v, %v", qi, err)
	}
}
