package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxQueuedBytes is the node-wide admission limit of the 3-node test
// cluster: small enough for a test to reach.
const maxQueuedBytes = 64 << 10

// TestInprocCluster runs three in-process nodes and checks the transport's
// behaviour against API.md: validation, forwarding and redirects,
// admission control, release on stream close, Verify and Status, and
// leadership changes.
func TestInprocCluster(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3, maxQueuedBytes: maxQueuedBytes})
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	step("status lists three voters", func(t *testing.T) { testStatus(t, c) })
	step("bad input is refused and changes nothing", func(t *testing.T) { testValidation(t, c) })
	step("forwarding and redirects", func(t *testing.T) { testForwarding(t, c) })
	step("enqueue stream", func(t *testing.T) { testEnqueueStream(t, c) })
	t.Run("cluster admin bad input", func(t *testing.T) { testAdminValidation(t, c) })
	step("stream close releases leases", func(t *testing.T) { testRelease(t, c) })
	step("lease limit and hand-back", func(t *testing.T) { testLimitAndHandBack(t, c) })
	step("verify", func(t *testing.T) { testVerify(t, c) })
	step("leadership change", func(t *testing.T) { testLeadershipChange(t, c) })
	step("verify after leadership change", func(t *testing.T) { testVerify(t, c) })
}

func testStatus(t *testing.T, c *testcluster.Cluster) {
	l := c.Leader()
	for _, n := range c.Nodes {
		// Polled: under load gossip may briefly call a peer suspect.
		waitUntil(t, 10*time.Second, n.ID+"'s status", func() error {
			st, err := n.Admin.Status(tctx(t, 5*time.Second), &raftqv1.StatusRequest{})
			if err != nil {
				return fmt.Errorf("Status: %w", err)
			}
			if st.LeaderId != l.ID || st.LeaderAddr != l.Addrs.GRPC || st.Term == 0 || len(st.Nodes) != 3 {
				return fmt.Errorf("Status = %v, want leader %s at %s and 3 nodes", st, l.ID, l.Addrs.GRPC)
			}
			for _, nd := range st.Nodes {
				want := "follower"
				if nd.Id == l.ID {
					want = "leader"
				}
				if nd.Suffrage != "voter" || nd.State != want || !nd.Healthy || nd.GrpcAddr != c.ByID(nd.Id).Addrs.GRPC || nd.RaftAddr == "" {
					return fmt.Errorf("Status node %v, want a healthy voter %s at %s", nd, want, c.ByID(nd.Id).Addrs.GRPC)
				}
				// Each node knows only its own applied index; the one asked
				// collects the others'.
				if nd.AppliedIndex == 0 {
					return fmt.Errorf("Status via %s: no applied index for %s", n.ID, nd.Id)
				}
				if nd.MaxLogVersion != fsm.MaxLogVersion {
					return fmt.Errorf("Status via %s: %s advertises log version %d, want %d", n.ID, nd.Id, nd.MaxLogVersion, fsm.MaxLogVersion)
				}
				if want := "build-of-" + nd.Id; nd.Version != want {
					return fmt.Errorf("Status via %s: %s advertises version %q, want %q", n.ID, nd.Id, nd.Version, want)
				}
			}
			// Every voter runs this build, so the cluster version rose to it.
			if st.ClusterVersion != fsm.MaxLogVersion {
				return fmt.Errorf("Status via %s: cluster version %d, want %d", n.ID, st.ClusterVersion, fsm.MaxLogVersion)
			}
			// The cluster setting started at the voters' (equal) proposal
			// when the cluster reached the version that made it one.
			if got := st.GetSettings().GetMaxQueuedBytes(); got != maxQueuedBytes {
				return fmt.Errorf("Status via %s: max_queued_bytes %d, want every voter's --max-queued-bytes %d", n.ID, got, maxQueuedBytes)
			}
			return nil
		})
		local, err := n.Admin.Status(tctx(t, 5*time.Second), &raftqv1.StatusRequest{LocalOnly: true})
		if err != nil {
			t.Fatalf("local Status: %v", err)
		}
		for _, nd := range local.Nodes {
			if (nd.Id == n.ID) != (nd.AppliedIndex > 0) {
				t.Fatalf("local-only Status via %s: %s applied index %d (only its own is known)", n.ID, nd.Id, nd.AppliedIndex)
			}
		}
	}
	testHTTPStatusJSON(t, l)
}

// testHTTPStatusJSON: /status is the Status response in the one JSON
// encoding of the API (protojson, .proto field names, zeros present), the
// same as `raftq cluster status --json`.
func testHTTPStatusJSON(t *testing.T, n *testcluster.Node) {
	rec := httptest.NewRecorder()
	n.API().HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/status: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var st raftqv1.StatusResponse
	if err := protojson.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("/status is not protojson of StatusResponse: %v\n%s", err, rec.Body)
	}
	if st.LeaderId != n.ID || len(st.Nodes) != 3 {
		t.Fatalf("/status = %v", &st)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	// 64-bit integers are strings in protojson; names are the .proto's.
	if _, ok := raw["commit_index"].(string); !ok {
		t.Fatalf("/status commit_index = %#v, want a string (protojson int64)", raw["commit_index"])
	}
	if _, ok := raw["leaderId"]; ok {
		t.Fatal("/status uses camelCase names")
	}
}

func testVerify(t *testing.T, c *testcluster.Cluster) {
	for _, n := range c.Nodes {
		// An unreachable node (listed with an error) is retried; digests
		// that differ are not.
		waitUntil(t, 20*time.Second, "Verify via "+n.ID, func() error {
			v, err := n.Admin.Verify(tctx(t, 10*time.Second), &raftqv1.VerifyRequest{})
			if err != nil {
				return fmt.Errorf("Verify: %w", err)
			}
			if len(v.Nodes) != 3 {
				t.Fatalf("%s: Verify = %v, want 3 nodes", n.ID, v)
			}
			for _, nd := range v.Nodes {
				if nd.Error != "" {
					return fmt.Errorf("node %s: %s", nd.Id, nd.Error)
				}
			}
			for _, nd := range v.Nodes {
				if !v.Consistent || nd.Digest == "" || nd.Digest != v.Nodes[0].Digest || !nd.CountersOk || nd.AppliedIndex == 0 ||
					nd.AppliedIndex != v.Nodes[0].AppliedIndex {
					t.Fatalf("%s: Verify = %v: node %v differs from %v", n.ID, v, nd, v.Nodes[0])
				}
			}
			return nil
		})
	}
}

// validationCase is one bad request. Either the call fails with code, or
// (item set) it succeeds and its first item result carries item.
type validationCase struct {
	name string
	code codes.Code
	item codes.Code
	// leaderOnly: a follower redirects a Lease stream before it looks at
	// the queue, so the case applies to the leader only.
	leaderOnly bool
	// msg, when set, must be part of the error's message: errors name
	// the field, queue or token they are about, in units people read.
	msg  string
	call func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error)
}

func testForwarding(t *testing.T, c *testcluster.Cluster) {
	l, fs := c.Leader(), c.Followers()
	f, f2 := fs[0], fs[1]
	ctx := tctx(t, time.Minute)

	// Unary writes on a follower are forwarded to the leader.
	if _, err := f.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "fwd", Config: &raftqv1.QueueConfig{VisibilityTimeoutMs: 60_000}}); err != nil {
		t.Fatalf("CreateQueue via follower: %v", err)
	}
	er, err := f.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{
		{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")},
	}})
	if err != nil || len(er.GetMessageIds()) != 3 {
		t.Fatalf("Enqueue via follower = %v, %v", er, err)
	}
	gq, err := f2.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "fwd"})
	if err != nil || gq.Queue.Stats.Ready != 3 {
		t.Fatalf("GetQueue via follower = %v, %v", gq, err)
	}
	pk, err := f.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "fwd"})
	if err != nil || len(pk.Messages) != 3 || pk.Messages[0].Id != er.MessageIds[0] {
		t.Fatalf("Peek via follower = %v, %v", pk, err)
	}

	// Lease streams are not forwarded: a follower redirects to the leader.
	for _, n := range fs {
		checkRedirect(t, leaseErr(ctx, n.Broker, &raftqv1.LeaseRequest{Queue: "fwd"}), transport.ReasonNotLeader, l)
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "fwd", MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 3)
	xr, err := f.Broker.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Queue: "fwd", Leases: refsOf(ds), ExtendByMs: 120_000})
	if err != nil || len(xr.Results) != 3 || !xr.Results[0].Ok || xr.DeadlinesMs[0] <= ds[0].LeaseDeadlineMs {
		t.Fatalf("ExtendLease via follower = %v, %v (deadline was %d)", xr, err, ds[0].LeaseDeadlineMs)
	}
	nr, err := f2.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "fwd", Nacks: []*raftqv1.NackItem{{MessageId: ds[0].Id, LeaseToken: ds[0].LeaseToken}}})
	if err != nil || !nr.Results[0].Ok {
		t.Fatalf("Nack via follower = %v, %v", nr, err)
	}
	again := recvN(t, s, 1)[0]
	if again.Id != ds[0].Id || again.Attempt != 2 {
		t.Fatalf("after nack got %s attempt %d, want %s attempt 2", again.Id, again.Attempt, ds[0].Id)
	}
	ar, err := f.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "fwd", Acks: refsOf([]*raftqv1.Delivery{again, ds[1], ds[2]})})
	if err != nil || len(ar.Results) != 3 {
		t.Fatalf("Ack via follower = %v, %v", ar, err)
	}
	for i, r := range ar.Results {
		if !r.Ok {
			t.Fatalf("ack %d via follower: %v", i, r)
		}
	}
	cancel()

	// The loop guard: a call already forwarded once is not forwarded again
	// by a follower; it gets a NOT_LEADER redirect and changes nothing.
	before := c.Digests()
	gctx := metadata.AppendToOutgoingContext(ctx, transport.ForwardedByKey, "n9")
	_, err = f.Broker.Enqueue(gctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("loop")}}})
	checkRedirect(t, err, transport.ReasonNotLeader, l)
	_, err = f2.Broker.CreateQueue(gctx, &raftqv1.CreateQueueRequest{Name: "loop"})
	checkRedirect(t, err, transport.ReasonNotLeader, l)
	if c.Digests() != before {
		t.Fatal("a refused forwarded call changed the state")
	}
	// The leader serves a forwarded call.
	if _, err := l.Broker.Enqueue(gctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("served")}}}); err != nil {
		t.Fatalf("forwarded call on the leader: %v", err)
	}

	if r, err := f.Broker.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "fwd"}); err != nil || r.Purged != 1 {
		t.Fatalf("PurgeQueue via follower = %v, %v", r, err)
	}
	if _, err := f2.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "fwd"}); err != nil {
		t.Fatalf("DeleteQueue via follower: %v", err)
	}
	c.Synced()
	for _, n := range c.Nodes {
		if _, err := n.State().Reader().GetQueue("fwd"); !errors.Is(err, fsm.ErrQueueNotFound) {
			t.Fatalf("%s still has the queue: %v", n.ID, err)
		}
	}
}

// testRelease: a stream that goes away returns its leases at once (not
// after the visibility timeout), and each such release counts as a
// delivery attempt, so a message that kills its consumers still reaches the
// dead-letter queue after max_deliveries (API.md, Attempts).
func testRelease(t *testing.T, c *testcluster.Cluster) {
	l := c.Leader()
	ctx := tctx(t, time.Minute)
	const n = 5
	mustCreate(t, l, "rel", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000, MaxDeliveries: 2})
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprint(i))
	}
	ids := mustEnqueue(t, l, "rel", payloads...)
	for attempt := int32(1); attempt <= 2; attempt++ {
		sctx, cancel := context.WithCancel(ctx)
		s, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "rel", MaxInFlight: n, ConsumerName: "doomed"})
		if err != nil {
			t.Fatal(err)
		}
		ds := recvN(t, s, n)
		for i, d := range ds {
			if d.Id != ids[i] || d.Attempt != attempt {
				t.Fatalf("delivery %d = %s attempt %d, want %s attempt %d", i, d.Id, d.Attempt, ids[i], attempt)
			}
		}
		waitUntil(t, 5*time.Second, "the consumer to be counted", func() error {
			if q := queueInfo(t, l, "rel"); q.Stats.InFlight != n || q.Stats.Consumers != 1 {
				return fmt.Errorf("stats %v", q.Stats)
			}
			return nil
		})
		cancel()
		// Released at once: far sooner than the 10-minute visibility timeout.
		waitUntil(t, 10*time.Second, "leases to be released", func() error {
			q := queueInfo(t, l, "rel")
			want := &raftqv1.QueueStats{Ready: n, EnqueuedTotal: n}
			if attempt == 2 { // past max_deliveries: dead-lettered
				want = &raftqv1.QueueStats{DeadLettered: n, EnqueuedTotal: n}
			}
			if q.Stats.Ready != want.Ready || q.Stats.InFlight != 0 || q.Stats.DeadLettered != want.DeadLettered || q.Stats.Consumers != 0 || q.Stats.ExpiredTotal != 0 {
				return fmt.Errorf("stats %v, want %v", q.Stats, want)
			}
			return nil
		})
	}
	pk, err := l.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "rel", DeadLetter: true})
	if err != nil || len(pk.Messages) != n {
		t.Fatalf("dead letters = %v, %v", pk, err)
	}
	for _, d := range pk.Messages {
		if d.Attempt != 2 || d.DeadLetterReason != "max_deliveries" {
			t.Fatalf("dead letter %s: attempt %d reason %q", d.Id, d.Attempt, d.DeadLetterReason)
		}
	}
	if _, err := l.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "rel"}); err != nil {
		t.Fatal(err)
	}
}

// testLimitAndHandBack: a Lease limit gets exactly that many deliveries
// (no extras whose return would cost attempts), and a delivery handed back
// unprocessed is redelivered without counting as an attempt.
func testLimitAndHandBack(t *testing.T, c *testcluster.Cluster) {
	l, f := c.Leader(), c.Followers()[0]
	ctx := tctx(t, time.Minute)
	mustCreate(t, l, "lim2", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
	ids := mustEnqueue(t, l, "lim2", []byte("1"), []byte("2"), []byte("3"), []byte("4"), []byte("5"))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "lim2", MaxInFlight: 5, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 2)
	nr, err := f.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "lim2", Nacks: []*raftqv1.NackItem{{MessageId: ds[0].Id, LeaseToken: ds[0].LeaseToken, Unprocessed: true}}})
	if err != nil || !nr.Results[0].Ok {
		t.Fatalf("hand-back = %v, %v", nr, err)
	}
	if ar, err := f.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lim2", Acks: refsOf(ds[1:])}); err != nil || !ar.Results[0].Ok {
		t.Fatalf("ack = %v, %v", ar, err)
	}
	// The stream has its two, both settled: credit came back, but nothing
	// more is granted, and the stream ends with OK.
	if r, err := s.Recv(); err != io.EOF {
		t.Fatalf("stream with limit 2 after 2 settled deliveries: %v, %v; want it ended with OK", r, err)
	}
	if q := queueInfo(t, l, "lim2"); q.Stats.InFlight != 0 || q.Stats.Ready != 4 {
		t.Fatalf("stream with limit 2 after 2 deliveries: stats %v", q.Stats)
	}
	cancel()
	s2, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "lim2", MaxInFlight: 5})
	if err != nil {
		t.Fatal(err)
	}
	rest := recvN(t, s2, 4)
	for _, d := range rest {
		if d.Attempt != 1 {
			t.Fatalf("delivery %s attempt %d, want 1 (a hand-back does not count)", d.Id, d.Attempt)
		}
		if d.Id == ids[1] {
			t.Fatalf("acked message %s delivered again", d.Id)
		}
	}
	if ar, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lim2", Acks: refsOf(rest)}); err != nil || len(ar.Results) != 4 {
		t.Fatalf("ack = %v, %v", ar, err)
	}
	if _, err := l.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "lim2"}); err != nil {
		t.Fatal(err)
	}
}

// testLeadershipChange: moving leadership ends the old leader's Lease
// streams with a redirect to the new leader, and leases granted by the old
// leader can be acked through the new one.
func testLeadershipChange(t *testing.T, c *testcluster.Cluster) {
	old := c.Leader()
	fs := c.Followers()
	via, target := fs[0], fs[1]
	ctx := tctx(t, time.Minute)
	mustCreate(t, old, "lc", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
	mustEnqueue(t, old, "lc", []byte("1"), []byte("2"), []byte("3"))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := old.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "lc", MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 3)

	// TransferLeadership is forwarded to the leader by a follower.
	tr, err := via.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{ToId: target.ID})
	if err != nil || tr.NewLeaderId != target.ID {
		t.Fatalf("TransferLeadership to %s via %s = %v, %v", target.ID, via.ID, tr, err)
	}
	_, err = s.Recv()
	checkRedirect(t, err, transport.ReasonNotLeader, target)

	if nl := c.WaitStable(20 * time.Second); nl != target {
		t.Fatalf("leader is %s, want %s", nl.ID, target.ID)
	}
	checkRedirect(t, leaseErr(ctx, old.Broker, &raftqv1.LeaseRequest{Queue: "lc"}), transport.ReasonNotLeader, target)

	// Leases of the old leader's term are acked on the new leader.
	ar, err := target.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lc", Acks: refsOf(ds)})
	if err != nil || len(ar.Results) != 3 {
		t.Fatalf("Ack on the new leader = %v, %v", ar, err)
	}
	for i, r := range ar.Results {
		if !r.Ok {
			t.Fatalf("ack %d of an old-term lease: %v", i, r)
		}
	}
	if q := queueInfo(t, target, "lc"); q.Stats.AckedTotal != 3 || q.Stats.InFlight != 0 || q.Stats.Ready != 0 {
		t.Fatalf("after acks: %v", q.Stats)
	}
}

// TestNoLeader: with no leader (a lone node waiting for a second one),
// calls fail with Unavailable NO_LEADER once the leader wait is over.
func TestNoLeader(t *testing.T) {
	const wait = 300 * time.Millisecond
	c := startInproc(t, inprocOpts{nodes: 1, expect: 2, leaderWait: wait, noWait: true})
	n := c.Nodes[0]
	ctx := tctx(t, 30*time.Second)
	calls := map[string]func() error{
		"CreateQueue": func() error {
			_, err := n.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q"})
			return err
		},
		"Enqueue": func() error {
			_, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{}}})
			return err
		},
		"GetQueue": func() error {
			_, err := n.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "q"})
			return err
		},
		"Lease": func() error { return leaseErr(ctx, n.Broker, &raftqv1.LeaseRequest{Queue: "q"}) },
		"TransferLeadership": func() error {
			_, err := n.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{})
			return err
		},
		"Verify": func() error {
			_, err := n.Admin.Verify(ctx, &raftqv1.VerifyRequest{})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call()
			checkRedirect(t, err, transport.ReasonNoLeader, nil)
			if el := time.Since(start); el < wait {
				t.Fatalf("NO_LEADER after %v, before the %v leader wait", el, wait)
			}
		})
	}
	// Status answers locally.
	st, err := n.Admin.Status(ctx, &raftqv1.StatusRequest{})
	if err != nil || st.LeaderId != "" {
		t.Fatalf("Status = %v, %v", st, err)
	}
}

func mustCreate(t *testing.T, n *testcluster.Node, name string, cfg *raftqv1.QueueConfig) {
	t.Helper()
	if _, err := n.Broker.CreateQueue(tctx(t, 10*time.Second), &raftqv1.CreateQueueRequest{Name: name, Config: cfg}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func mustEnqueue(t *testing.T, n *testcluster.Node, queue string, payloads ...[]byte) []string {
	t.Helper()
	req := &raftqv1.EnqueueRequest{Queue: queue}
	for _, p := range payloads {
		req.Messages = append(req.Messages, &raftqv1.EnqueueMessage{Payload: p})
	}
	r, err := n.Broker.Enqueue(tctx(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("enqueue to %s: %v", queue, err)
	}
	return r.MessageIds
}

func queueInfo(t *testing.T, n *testcluster.Node, name string) *raftqv1.QueueInfo {
	t.Helper()
	r, err := n.Broker.GetQueue(tctx(t, 10*time.Second), &raftqv1.GetQueueRequest{Name: name})
	if err != nil {
		t.Fatalf("GetQueue %s: %v", name, err)
	}
	return r.Queue
}
