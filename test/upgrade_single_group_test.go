package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// lastSingleGroup is the last commit of main whose cluster keeps
// everything in one Raft group: its queues and the cluster-wide state
// (identities, tokens, grants, cluster settings, the cluster version).
// From issue 21 on a meta group holds the cluster-wide state beside the
// data group, and a cluster of this build upgrades to that in place.
const lastSingleGroup = "3b73f7134638bf2ce6d447f61df39f0a17bc0a1d"

// lastSingleGroupVersion is lastSingleGroup's newest log version.
const lastSingleGroupVersion = 20

// upgradeAdminToken is the bootstrap token of TestRollingUpgradeFromSingleGroup's
// nodes: the admin that sets the cluster up and checks it.
const upgradeAdminToken = "upgrade-bootstrap-token-0123456789abcdef"

// TestRollingUpgradeFromSingleGroup runs a three-node cluster of
// lastSingleGroup with token auth and gives it cluster-wide state a
// client depends on: changed cluster settings, a worker identity with a
// token and grants on jobs.*, a token revoked, a queue with its own
// dead-letter queue and dedup window holding messages a client sent with
// dedup ids, three of them leased on a stream whose lease tokens the old
// build drew, one dead-lettered, one ready. Then, under a continuous
// load that runs as the worker, it upgrades the nodes to this build one
// at a time, followers first, and waits for the handover (waitHandover).
// After it every node answers as before: the worker's token
// authenticates and its grants allow and deny the same calls, the
// revoked token stays refused, the settings, the tokens and grants
// (ListAuth) and the queue's config read back equal; every message is
// in the state it was in under its old id, the held leases are acked
// with the old build's lease tokens, and a re-enqueue with an old dedup
// id answers the old message id. The load lost nothing and held nothing
// twice, and the replicas agree. Last, a token and a grant made after
// the upgrade work, and are enforced, on every node.
func TestRollingUpgradeFromSingleGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier raftq and upgrades a three-node cluster")
	}
	began := time.Now()
	oldBin := buildOld(t, lastSingleGroup, "the last single-group build")

	nodes := make([]*harness.Node, 3)
	for i := range nodes {
		nodes[i] = harness.TestNode(t, oldBin, fmt.Sprintf("n%d", i+1))
		if err := nodes[i].UseBootstrapToken(upgradeAdminToken); err != nil {
			t.Fatal(err)
		}
	}
	flags := append(harness.JoinFlags(nodes), "--lease-grace", "2s")
	for _, n := range nodes {
		n.Args = append(n.Args, flags...)
		n.Start()
	}
	c := harness.Dial(t, nodes...) // as the bootstrap admin
	ctx := ctxT(t)
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, c, nodes[0], 3)
	// The old build raises its cluster version once every voter's gossip
	// is known; settings and keyed writes need it (version 20 there).
	harness.Eventually(t, 60*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := c.ClusterStatus(cctx)
		if err != nil {
			return err
		}
		if st.ClusterVersion < lastSingleGroupVersion {
			return fmt.Errorf("the old cluster at log version %d, want %d", st.ClusterVersion, lastSingleGroupVersion)
		}
		return nil
	})

	// Cluster settings away from their defaults (unlimited bytes, 10,000
	// queues), large enough for what the test holds.
	maxQueuedBytes, maxQueues := int64(1<<30), int64(64)
	settings, err := c.ChangeClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &maxQueuedBytes, MaxQueues: &maxQueues})
	if err != nil {
		t.Fatal(err)
	}
	if settings.GetMaxQueuedBytes() != maxQueuedBytes || settings.GetMaxQueues() != maxQueues {
		t.Fatalf("settings committed as %v", settings)
	}
	jobs := &raftqv1.QueueConfig{VisibilityTimeoutMs: 20_000, MaxDeliveries: 3, DeadLetterQueue: "jobs.dead", DedupWindowMs: time.Hour.Milliseconds()}
	for _, q := range []struct {
		name string
		cfg  *raftqv1.QueueConfig
	}{{"jobs.a", jobs}, {"jobs.up", &raftqv1.QueueConfig{VisibilityTimeoutMs: 20_000}}, {"other", nil}} {
		if _, err := c.CreateQueue(ctx, q.name, q.cfg); err != nil {
			t.Fatal(err)
		}
	}
	worker, err := c.CreateToken(ctx, "worker-1", "worker", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Grant(ctx, "worker", "jobs.*", "produce", "consume", "browse"); err != nil {
		t.Fatal(err)
	}
	revoked, err := c.CreateToken(ctx, "worker-revoked", "worker", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeToken(ctx, "worker-revoked"); err != nil {
		t.Fatal(err)
	}
	wc := dialAs(t, worker.Token, nodes...)

	// Five messages with dedup ids. Four are leased on one stream, with a
	// visibility timeout that outlasts the test: the lease tokens are the
	// old build's. One of those is dead-lettered, three stay held; the
	// fifth stays ready.
	var msgs []sentMessage
	for i := range 5 {
		m := sentMessage{dedup: fmt.Sprintf("order-%d", i), payload: fmt.Sprintf("order %d", i)}
		ids, err := wc.Enqueue(ctx, "jobs.a", &raftqv1.EnqueueMessage{Payload: []byte(m.payload), DedupId: m.dedup})
		if err != nil {
			t.Fatal(err)
		}
		m.id = ids[0]
		msgs = append(msgs, m)
	}
	leaseCtx, endLease := context.WithCancel(ctx)
	t.Cleanup(endLease)
	stream, err := raftqv1.NewBrokerClient(connAs(t, leaderOf(t, nodes), worker.Token)).Lease(leaseCtx,
		&raftqv1.LeaseRequest{Queue: "jobs.a", ConsumerName: "held", MaxInFlight: 4, Limit: 4, VisibilityTimeoutMs: 10 * time.Minute.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	var leased []*raftqv1.Delivery
	for len(leased) < 4 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("lease on the old build: %v (after %d deliveries)", err, len(leased))
		}
		leased = append(leased, r.Messages...)
	}
	want := map[string]string{} // message id -> its state, as GetMessage names it
	for _, m := range msgs {
		want[m.id] = "ready"
	}
	dead, held := leased[0], leased[1:]
	res, err := wc.Nack(ctx, "jobs.a", &raftqv1.NackItem{MessageId: dead.Id, LeaseToken: dead.LeaseToken, DeadLetter: true, Reason: "poison"})
	if err != nil || !res[0].Ok {
		t.Fatalf("dead-letter nack on the old build: %v %v", res, err)
	}
	want[dead.Id] = "dead_lettered"
	for _, d := range held {
		want[d.Id] = "in_flight"
	}
	// A re-enqueue is deduplicated on the old build: what the upgrade must
	// keep.
	checkDedup(t, ctx, wc, msgs, "on the old build")

	// What every node answers before the upgrade (and all agree on).
	before := awaitViews(t, nodes, worker.Token, revoked.Token, "on the old build", nil)
	if !slices.ContainsFunc(before.auth, func(id *raftqv1.IdentityInfo) bool { return id.Name == "worker" && len(id.Grants) == 1 }) {
		t.Fatalf("ListAuth on the old build has no worker with its grant: %v", before.auth)
	}

	w := startWorkload(t, wc, "jobs.up", 2)
	w.progress(t, "on the old build", 200)
	order := upgradeOrder(t, nodes)
	for i, n := range order {
		upgradeNode(t, c, nodes, n)
		w.progress(t, "after upgrading "+n.ID, 100)
		t.Logf("upgraded %s (%d of %d) at %v, %d enqueues acknowledged so far", n.ID, i+1, len(order),
			time.Since(began).Round(time.Second), w.enqueued.Load())
	}
	waitHandover(ctx, t, c, nodes)
	w.progress(t, "after the handover", 100)
	t.Logf("handed over at %v", time.Since(began).Round(time.Second))

	// Every node answers as it did on the old build.
	after := awaitViews(t, nodes, worker.Token, revoked.Token, "after the upgrade", &before)
	// What the new build adds: the settings in force for data groups
	// (issue 22's defaults: the legacy group alone, 3 replicas).
	if g, r := after.settings.GetGroups(), after.settings.GetReplicas(); g != 1 || r != 3 {
		t.Fatalf("after the upgrade: groups %d, replicas %d in force, want 1 and 3", g, r)
	}

	// Every message is where it was, under its old id; the leases the old
	// build granted are acked with its lease tokens.
	checkMessages(t, ctx, wc, msgs, want, "after the upgrade")
	var refs []*raftqv1.LeaseRef
	for _, d := range held {
		refs = append(refs, &raftqv1.LeaseRef{MessageId: d.Id, LeaseToken: d.LeaseToken})
		want[d.Id] = "acked"
	}
	acks, err := wc.Ack(ctx, "jobs.a", refs...)
	if err != nil {
		t.Fatalf("ack of leases held over the upgrade: %v", err)
	}
	for i, r := range acks {
		if !r.Ok {
			t.Fatalf("ack of %s (leased on the old build, lease token %s): %v", refs[i].MessageId, refs[i].LeaseToken, r)
		}
	}
	checkMessages(t, ctx, wc, msgs, want, "after the acks")
	// An old dedup id still names its message, through every node (the
	// acked and the dead-lettered ones' entries included).
	for _, n := range nodes {
		checkDedupAt(t, ctx, connAs(t, n, worker.Token), msgs, "through "+n.ID+" after the upgrade")
	}

	w.drain(t)
	t.Logf("%d enqueues acknowledged over the upgrade, every one consumed", w.enqueued.Load())

	// A token and a grant made after the upgrade work on every node, and
	// the grant allows what it says and nothing more.
	fresh, err := c.CreateToken(ctx, "worker-2", "worker", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "extra.q", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Grant(ctx, "worker", "extra.*", "browse"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		conn := connAs(t, n, fresh.Token)
		harness.Eventually(t, 30*time.Second, func() error {
			return probesAnswer(conn, []authProbe{
				{"WhoAmI as worker", codes.OK, whoAmIs("worker")},
				{"GetQueue extra.q (browse, granted after the upgrade)", codes.OK, getQueue("extra.q")},
				{"Enqueue extra.q (browse only)", codes.PermissionDenied, enqueue("extra.q")},
				{"GetQueue jobs.a (browse on jobs.*)", codes.OK, getQueue("jobs.a")},
				{"GetQueue other (no grant)", codes.PermissionDenied, getQueue("other")},
			})
		})
	}
	if err := c.RevokeToken(ctx, "worker-2"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		conn := connAs(t, n, fresh.Token)
		harness.Eventually(t, 30*time.Second, func() error {
			return probesAnswer(conn, []authProbe{{"WhoAmI with a token revoked after the upgrade", codes.Unauthenticated, whoAmIs("worker")}})
		})
	}

	verifyConsistent(t, c, 3)
	appliedEverything(t, nodes)
}

// waitHandover waits until the cluster has handed over to this build:
// every node advertises the same log version, this build's newest, and
// the cluster version has risen to it. It is the test's one wait for the
// handover, so that what the handover comes to do (issue 21: bootstrap
// the meta group and seed it from the data group) is waited for here and
// every check after it sees the cluster as a client would from then on.
func waitHandover(ctx context.Context, t *testing.T, c *client.Client, nodes []*harness.Node) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := c.ClusterStatus(cctx)
		if err != nil {
			return err
		}
		if st.Withheld {
			return fmt.Errorf("status withheld: the client is no admin")
		}
		newest := st.Nodes[0].MaxLogVersion
		for _, nd := range st.Nodes {
			if nd.MaxLogVersion == 0 || nd.MaxLogVersion != newest {
				return fmt.Errorf("node %s advertises log version %d, %s %d", nd.Id, nd.MaxLogVersion, st.Nodes[0].Id, newest)
			}
		}
		if st.ClusterVersion != newest {
			return fmt.Errorf("cluster version %d, want %d", st.ClusterVersion, newest)
		}
		// Every node's meta replica is seeded, with the three nodes as
		// its voters and a leader it knows.
		for _, n := range nodes {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			own, err := raftqv1.NewClusterClient(rawConn(t, n)).Status(cctx, &raftqv1.StatusRequest{LocalOnly: true})
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", n.ID, err)
			}
			m := own.GetMeta()
			if !m.GetSeeded() || m.GetLeaderId() == "" || len(m.GetVoters()) != len(nodes) {
				return fmt.Errorf("%s: meta group %v, want seeded with %d voters and a leader", n.ID, m, len(nodes))
			}
		}
		return nil
	})
}

// sentMessage is a message the test enqueued with a dedup id.
type sentMessage struct{ dedup, payload, id string }

// dialAs connects a client to nodes that shows token.
func dialAs(t *testing.T, token string, nodes ...*harness.Node) *client.Client {
	t.Helper()
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.GRPC)
	}
	c, err := client.Dial(context.Background(), seeds, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// checkDedup re-enqueues every message of msgs with its dedup id: each
// answers the id its first enqueue got.
func checkDedup(t *testing.T, ctx context.Context, c *client.Client, msgs []sentMessage, when string) {
	t.Helper()
	for _, m := range msgs {
		ids, err := c.Enqueue(ctx, "jobs.a", &raftqv1.EnqueueMessage{Payload: []byte(m.payload), DedupId: m.dedup})
		if err != nil {
			t.Fatalf("re-enqueue of %s %s: %v", m.dedup, when, err)
		}
		if ids[0] != m.id {
			t.Fatalf("re-enqueue of %s %s answered %s, not the first enqueue's %s: its dedup entry is lost", m.dedup, when, ids[0], m.id)
		}
	}
}

// checkDedupAt is checkDedup through one node without the client's
// retries: an answer that is no error must name the old id.
func checkDedupAt(t *testing.T, ctx context.Context, conn *grpc.ClientConn, msgs []sentMessage, when string) {
	t.Helper()
	b := raftqv1.NewBrokerClient(conn)
	for _, m := range msgs {
		harness.Eventually(t, 30*time.Second, func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			res, err := b.Enqueue(cctx, &raftqv1.EnqueueRequest{Queue: "jobs.a", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte(m.payload), DedupId: m.dedup}}})
			if err != nil {
				return err // unavailable for now, say: the id is what counts
			}
			if got := res.MessageIds[0]; got != m.id {
				t.Fatalf("re-enqueue of %s %s answered %s, not the first enqueue's %s: its dedup entry is lost", m.dedup, when, got, m.id)
			}
			return nil
		})
	}
}

// checkMessages looks every message of msgs up by its id: it is in the
// state want names, with its payload (an acked one has none).
func checkMessages(t *testing.T, ctx context.Context, c *client.Client, msgs []sentMessage, want map[string]string, when string) {
	t.Helper()
	for _, m := range msgs {
		got, err := c.GetMessage(ctx, "jobs.a", m.id)
		if err != nil {
			t.Fatalf("message %s (%s) %s: %v", m.id, m.dedup, when, err)
		}
		if got.State != want[m.id] {
			t.Fatalf("message %s (%s) %s is %s, want %s", m.id, m.dedup, when, got.State, want[m.id])
		}
		if p := string(got.GetMessage().GetPayload()); got.State != "acked" && p != m.payload {
			t.Fatalf("message %s (%s) %s holds %q, want %q", m.id, m.dedup, when, p, m.payload)
		}
	}
}

// clusterView is what one node answers about the cluster-wide state: to
// its admin, to the worker and to the worker's revoked token.
type clusterView struct {
	auth     []*raftqv1.IdentityInfo // ListAuth
	settings *raftqv1.ClusterSettings
	jobs     *raftqv1.QueueConfig // jobs.a's
	deadIsDL bool                 // jobs.dead is a dead-letter queue
	whoAmI   *raftqv1.WhoAmIResponse
}

// workerProbes are calls of the worker (granted produce, consume and
// browse on jobs.*) and what each must answer: its token authenticates,
// its grants allow and deny what they say. None changes anything when
// it answers as it must.
var workerProbes = []authProbe{
	{"WhoAmI as worker", codes.OK, whoAmIs("worker")},
	{"GetQueue jobs.a (browse on jobs.*)", codes.OK, getQueue("jobs.a")},
	{"Peek jobs.dead (browse on jobs.*)", codes.OK, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := raftqv1.NewBrokerClient(conn).Peek(ctx, &raftqv1.PeekRequest{Queue: "jobs.dead", Limit: 1})
		return err
	}},
	{"GetQueue other (no grant)", codes.PermissionDenied, getQueue("other")},
	{"Enqueue other (no grant)", codes.PermissionDenied, enqueue("other")},
	{"CreateQueue jobs.new (no manage)", codes.PermissionDenied, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := raftqv1.NewBrokerClient(conn).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs.new"})
		return err
	}},
	{"PurgeQueue jobs.a (no manage)", codes.PermissionDenied, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := raftqv1.NewBrokerClient(conn).PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "jobs.a"})
		return err
	}},
	{"ListAuth (no admin)", codes.PermissionDenied, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := raftqv1.NewAuthClient(conn).ListAuth(ctx, &raftqv1.ListAuthRequest{})
		return err
	}},
	{"SetClusterSettings (no admin)", codes.PermissionDenied, func(ctx context.Context, conn *grpc.ClientConn) error {
		zero := int64(0)
		_, err := raftqv1.NewClusterClient(conn).SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: &zero})
		return err
	}},
}

// authProbe is one call and the status code it must answer.
type authProbe struct {
	name string
	want codes.Code
	call func(context.Context, *grpc.ClientConn) error
}

// probesAnswer makes every probe through conn and says which answered
// other than it must.
func probesAnswer(conn *grpc.ClientConn, probes []authProbe) error {
	var wrong []string
	for _, p := range probes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := p.call(ctx, conn)
		cancel()
		if got := status.Code(err); got != p.want {
			wrong = append(wrong, fmt.Sprintf("%s: %v, want %v", p.name, err, p.want))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%s answered:\n%s", conn.Target(), strings.Join(wrong, "\n"))
	}
	return nil
}

func whoAmIs(identity string) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, conn *grpc.ClientConn) error {
		who, err := raftqv1.NewAuthClient(conn).WhoAmI(ctx, &raftqv1.WhoAmIRequest{})
		if err == nil && (who.Identity != identity || who.Kind != "token") {
			return status.Errorf(codes.Internal, "taken for %s (%s), not the token's identity %s", who.Identity, who.Kind, identity)
		}
		return err
	}
}

func getQueue(name string) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := raftqv1.NewBrokerClient(conn).GetQueue(ctx, &raftqv1.GetQueueRequest{Name: name})
		return err
	}
}

func enqueue(queue string) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := raftqv1.NewBrokerClient(conn).Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: queue, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("probe")}}})
		return err
	}
}

// awaitViews waits until every node answers the worker's probes as they
// must, refuses the revoked token, and shows the same cluster-wide
// state: the one in want, or (want nil) the one the first node shows,
// which it returns.
func awaitViews(t *testing.T, nodes []*harness.Node, workerToken, revokedToken, when string, want *clusterView) clusterView {
	t.Helper()
	type conns struct{ admin, worker, revoked *grpc.ClientConn }
	cs := make([]conns, len(nodes))
	for i, n := range nodes {
		cs[i] = conns{rawConn(t, n), connAs(t, n, workerToken), connAs(t, n, revokedToken)}
	}
	var first clusterView
	harness.Eventually(t, 60*time.Second, func() error {
		for i, n := range nodes {
			if err := probesAnswer(cs[i].worker, workerProbes); err != nil {
				return fmt.Errorf("%s, the worker's calls: %w", when, err)
			}
			if err := probesAnswer(cs[i].revoked, []authProbe{{"WhoAmI with a revoked token", codes.Unauthenticated, whoAmIs("worker")}}); err != nil {
				return fmt.Errorf("%s: %w", when, err)
			}
			v, err := viewAt(cs[i].admin, cs[i].worker)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", when, n.ID, err)
			}
			if i == 0 {
				first = v // what is returned: the first node's view
			}
			switch {
			case want != nil:
				if d := v.differs(*want); d != "" {
					return fmt.Errorf("%s, %s answers otherwise than before: %s", when, n.ID, d)
				}
			case i == 0:
			default:
				if d := v.differs(first); d != "" {
					return fmt.Errorf("%s, %s and %s disagree: %s", when, n.ID, nodes[0].ID, d)
				}
			}
		}
		return nil
	})
	return first
}

// viewAt reads one node's clusterView (its own: Status local only).
func viewAt(admin, worker *grpc.ClientConn) (clusterView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var v clusterView
	la, err := raftqv1.NewAuthClient(admin).ListAuth(ctx, &raftqv1.ListAuthRequest{})
	if err != nil {
		return v, fmt.Errorf("ListAuth: %w", err)
	}
	v.auth = la.Identities
	st, err := raftqv1.NewClusterClient(admin).Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
	if err != nil {
		return v, fmt.Errorf("Status: %w", err)
	}
	v.settings = st.Settings
	for _, q := range []string{"jobs.a", "jobs.dead"} {
		qi, err := raftqv1.NewBrokerClient(admin).GetQueue(ctx, &raftqv1.GetQueueRequest{Name: q})
		if err != nil {
			return v, fmt.Errorf("GetQueue %s: %w", q, err)
		}
		if q == "jobs.a" {
			v.jobs = qi.Queue.Config
		} else {
			v.deadIsDL = qi.Queue.IsDeadLetterQueue
		}
	}
	if v.whoAmI, err = raftqv1.NewAuthClient(worker).WhoAmI(ctx, &raftqv1.WhoAmIRequest{}); err != nil {
		return v, fmt.Errorf("WhoAmI: %w", err)
	}
	return v, nil
}

// oldSettings is s with only the fields the last single-group release
// answers: the ones added since (groups, replicas: issue 22) are new
// information a new node adds, not a change of what it answered before.
func oldSettings(s *raftqv1.ClusterSettings) *raftqv1.ClusterSettings {
	if s == nil {
		return nil
	}
	return &raftqv1.ClusterSettings{MaxQueuedBytes: s.GetMaxQueuedBytes(), MaxQueues: s.GetMaxQueues()}
}

// differs says how v differs from w ("" if it does not).
func (v clusterView) differs(w clusterView) string {
	var d []string
	if len(v.auth) != len(w.auth) || !slices.EqualFunc(v.auth, w.auth, func(a, b *raftqv1.IdentityInfo) bool { return proto.Equal(a, b) }) {
		d = append(d, fmt.Sprintf("identities %v, before %v", v.auth, w.auth))
	}
	for _, p := range []struct {
		what string
		a, b proto.Message
	}{{"settings", oldSettings(v.settings), oldSettings(w.settings)}, {"jobs.a's config", v.jobs, w.jobs}, {"the worker's WhoAmI", v.whoAmI, w.whoAmI}} {
		if !proto.Equal(p.a, p.b) {
			d = append(d, fmt.Sprintf("%s {%v}, before {%v}", p.what, p.a, p.b))
		}
	}
	if v.deadIsDL != w.deadIsDL {
		d = append(d, fmt.Sprintf("jobs.dead is a dead-letter queue: %v, before %v", v.deadIsDL, w.deadIsDL))
	}
	return strings.Join(d, "; ")
}
