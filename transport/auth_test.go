package transport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const testBootstrap = "rqt_bootstrap-token-for-tests-only"

func bearer(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// waitAuthVersion waits until the cluster runs log version 5, from which
// auth commands are proposed.
func waitAuthVersion(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	// The newest version, where the meta group holds identities: the
	// kit waits for its seed too.
	c.WaitClusterVersion(fsm.MaxLogVersion)
}

func mustToken(t *testing.T, ctx context.Context, n *testcluster.Node, name string, ttl time.Duration) string {
	t.Helper()
	resp, err := raftqv1.NewAuthClient(n.Conn).CreateToken(bearer(ctx, testBootstrap), &raftqv1.CreateTokenRequest{Name: name, ExpiresInMs: ttl.Milliseconds()})
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	if !strings.HasPrefix(resp.Token, "rqt_") || resp.Name != name || resp.Identity != name {
		t.Fatalf("create token answered %+v", resp)
	}
	return resp.Token
}

func mustGrant(t *testing.T, ctx context.Context, n *testcluster.Node, req *raftqv1.GrantRequest) {
	t.Helper()
	if _, err := raftqv1.NewAuthClient(n.Conn).Grant(bearer(ctx, testBootstrap), req); err != nil {
		t.Fatalf("grant %v: %v", req, err)
	}
}

// authCall is one RPC as a caller with some token makes it.
type authCall struct {
	method string
	perm   string // what a PERMISSION_DENIED names
	queue  string // "" for admin methods
	call   func(ctx context.Context, n *testcluster.Node) error
}

func authCalls() []authCall {
	const q = "jobs.a"
	unary := func(method, perm, queue string, f func(ctx context.Context, n *testcluster.Node) error) authCall {
		return authCall{method, perm, queue, f}
	}
	fakeRef := []*raftqv1.LeaseRef{{MessageId: "0000000000100000", LeaseToken: "0000000000100000"}}
	return []authCall{
		unary("CreateQueue", "manage", "new.q", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "new.q"})
			return err
		}),
		unary("UpdateQueue", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: q, Config: &raftqv1.QueueConfig{MaxDeliveries: 9}})
			return err
		}),
		unary("DeleteQueue", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: q})
			return err
		}),
		unary("PurgeQueue", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: q})
			return err
		}),
		unary("Redrive", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: q})
			return err
		}),
		unary("PauseQueue", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: q})
			return err
		}),
		unary("PauseQueue keyed", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: q, FairnessKey: "tenant-a", DurationMs: 60_000})
			return err
		}),
		unary("ResumeQueue", "manage", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.ResumeQueue(ctx, &raftqv1.ResumeQueueRequest{Name: q})
			return err
		}),
		unary("GetQueue", "browse", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: q})
			return err
		}),
		unary("Peek", "browse", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: q, Limit: 10})
			return err
		}),
		unary("Peek DLQ", "browse", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: q, Limit: 10, DeadLetter: true})
			return err
		}),
		unary("GetMessage", "browse", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.GetMessage(ctx, &raftqv1.GetMessageRequest{Queue: q, MessageId: fakeRef[0].MessageId})
			return err
		}),
		unary("ListConsumers", "browse", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: q})
			return err
		}),
		unary("Enqueue", "produce", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: q, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}})
			return err
		}),
		unary("EnqueueStream", "produce", q, func(ctx context.Context, n *testcluster.Node) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := n.Broker.EnqueueStream(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&raftqv1.EnqueueStreamRequest{Seq: 1, Request: &raftqv1.EnqueueRequest{Queue: q, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}}); err != nil && !errors.Is(err, io.EOF) {
				return err
			} // on io.EOF the server ended the stream: Recv has its status
			r, err := s.Recv()
			if err == nil && r.GetError() != nil {
				err = status.ErrorProto(r.GetError())
			}
			return err
		}),
		unary("Lease", "consume", q, func(ctx context.Context, n *testcluster.Node) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return leaseErr(ctx, n.Broker, &raftqv1.LeaseRequest{Queue: q, MaxInFlight: 1})
		}),
		unary("Ack", "consume", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: q, Acks: fakeRef})
			return err
		}),
		unary("Nack", "consume", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: q, Nacks: []*raftqv1.NackItem{{MessageId: fakeRef[0].MessageId, LeaseToken: fakeRef[0].LeaseToken}}})
			return err
		}),
		unary("ExtendLease", "consume", q, func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Broker.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Queue: q, Leases: fakeRef})
			return err
		}),
		unary("RemoveNode", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.RemoveNode(ctx, &raftqv1.RemoveNodeRequest{Id: n.ID, Force: true})
			return err
		}),
		unary("TransferLeadership", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{})
			return err
		}),
		unary("Snapshot", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.Snapshot(ctx, &raftqv1.SnapshotRequest{})
			return err
		}),
		unary("Verify", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.Verify(ctx, &raftqv1.VerifyRequest{})
			return err
		}),
		unary("Checkpoint", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.Checkpoint(ctx, &raftqv1.CheckpointRequest{})
			return err
		}),
		unary("LocalDigest", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.LocalDigest(ctx, &raftqv1.LocalDigestRequest{Index: 1})
			return err
		}),
		unary("Leave", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := n.Admin.Leave(ctx, &raftqv1.LeaveRequest{Force: true})
			return err
		}),
		unary("Backup", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := n.Admin.Backup(ctx, &raftqv1.BackupRequest{})
			if err == nil {
				_, err = s.Recv() // a stream's status comes with its first message
			}
			return err
		}),
		unary("CreateToken", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := raftqv1.NewAuthClient(n.Conn).CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "sneaky"})
			return err
		}),
		unary("RevokeToken", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := raftqv1.NewAuthClient(n.Conn).RevokeToken(ctx, &raftqv1.RevokeTokenRequest{Name: "weak"})
			return err
		}),
		unary("Grant", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := raftqv1.NewAuthClient(n.Conn).Grant(ctx, &raftqv1.GrantRequest{Identity: "weak", Admin: true})
			return err
		}),
		unary("Ungrant", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := raftqv1.NewAuthClient(n.Conn).Ungrant(ctx, &raftqv1.UngrantRequest{Identity: "weak", Pattern: "unrelated.*"})
			return err
		}),
		unary("ListAuth", "admin", "", func(ctx context.Context, n *testcluster.Node) error {
			_, err := raftqv1.NewAuthClient(n.Conn).ListAuth(ctx, &raftqv1.ListAuthRequest{})
			return err
		}),
	}
}

// observed is what a refused call must leave as it was: every node's state
// (queues, messages, leases, counters; auth via ListAuth) and log.
type observed struct {
	digests []string
	applied []uint64
	queues  string
	auth    string
	voters  int
}

func observe(t *testing.T, ctx context.Context, c *testcluster.Cluster) observed {
	t.Helper()
	var o observed
	c.Synced()
	for _, n := range c.Nodes {
		o.digests = append(o.digests, testcluster.StateDigest(t, n.State()))
		o.applied = append(o.applied, n.State().Reader().AppliedIndex())
	}
	l := c.Leader()
	qs, err := l.Broker.ListQueues(bearer(ctx, testBootstrap), &raftqv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.Queues {
		// Name, config and counters; the drain estimate is a rate that
		// moves with time alone.
		o.queues += fmt.Sprint(q.GetName(), q.GetConfig(), q.GetStats(), ";")
	}
	as, err := raftqv1.NewAuthClient(l.Conn).ListAuth(bearer(ctx, testBootstrap), &raftqv1.ListAuthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	o.auth = fmt.Sprint(as.Identities)
	for _, ns := range l.ClusterNode().Status().Nodes {
		if ns.Suffrage == "voter" {
			o.voters++
		}
	}
	return o
}

// TestEveryRPCRefusesWithoutPermission: every RPC, called without
// credentials, with a revoked token, with an expired token and with a
// token that lacks the permission, answers UNAUTHENTICATED or
// PERMISSION_DENIED (naming the permission and the queue), on the leader
// and through a follower, and changes nothing: every replica's state and
// applied index, the stats and the auth state are equal before and after.
func TestEveryRPCRefusesWithoutPermission(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, 3*time.Minute)
	l := c.Leader()
	admin := bearer(ctx, testBootstrap)
	for _, q := range []string{"jobs.a", "other"} {
		if _, err := l.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Broker.Enqueue(admin, &raftqv1.EnqueueRequest{Queue: q, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}}); err != nil {
			t.Fatal(err)
		}
	}
	weak := mustToken(t, ctx, l, "weak", 0)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "weak", Pattern: "unrelated.*", Allow: []string{"produce", "consume", "browse", "manage"}})
	revoked := mustToken(t, ctx, l, "revoked", 0)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "revoked", Admin: true})
	if _, err := raftqv1.NewAuthClient(l.Conn).RevokeToken(admin, &raftqv1.RevokeTokenRequest{Name: "revoked"}); err != nil {
		t.Fatal(err)
	}
	expired := mustToken(t, ctx, l, "expired", 50*time.Millisecond)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "expired", Admin: true})
	for _, n := range c.Nodes {
		waitUntil(t, 10*time.Second, "the token to expire on "+n.ID, func() error {
			_, err := raftqv1.NewAuthClient(n.Conn).WhoAmI(bearer(ctx, expired), &raftqv1.WhoAmIRequest{})
			if status.Code(err) != codes.Unauthenticated {
				return fmt.Errorf("WhoAmI: %v", err)
			}
			return nil
		})
	}

	before := observe(t, ctx, c)
	creds := []struct {
		name, token string
		want        codes.Code
	}{
		{"no credentials", "", codes.Unauthenticated},
		{"garbage token", "rqt_not-a-token", codes.Unauthenticated},
		{"revoked token", revoked, codes.Unauthenticated},
		{"expired token", expired, codes.Unauthenticated},
		{"wrong permission", weak, codes.PermissionDenied},
	}
	for _, call := range authCalls() {
		for _, cr := range creds {
			for _, n := range c.Nodes {
				err := call.call(bearer(ctx, cr.token), n)
				if status.Code(err) != cr.want {
					t.Errorf("%s with %s on %s: %v, want %v", call.method, cr.name, n.ID, err, cr.want)
					continue
				}
				if cr.want == codes.PermissionDenied {
					msg := status.Convert(err).Message()
					if !strings.Contains(msg, call.perm) || !strings.Contains(msg, call.queue) {
						t.Errorf("%s denial %q does not name %s and %q", call.method, msg, call.perm, call.queue)
					}
				}
			}
		}
	}
	after := observe(t, ctx, c)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused calls changed something:\nbefore %+v\nafter  %+v", before, after)
	}

	// A forged identity header from a client (not a node certificate) is
	// ignored: it neither authenticates nor adds to a token's rights.
	forged := metadata.AppendToOutgoingContext(ctx, "raftq-identity", "bootstrap", "raftq-identity-kind", "bootstrap", "raftq-identity-admin", "true", "raftq-forwarded-by", "n1")
	for _, n := range c.Nodes {
		if _, err := n.Admin.Snapshot(forged, &raftqv1.SnapshotRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("forged identity alone on %s: %v", n.ID, err)
		}
		if _, err := n.Broker.DeleteQueue(bearer(forged, weak), &raftqv1.DeleteQueueRequest{Name: "jobs.a"}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("forged identity with a weak token on %s: %v", n.ID, err)
		}
	}
	if after := observe(t, ctx, c); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("forged identities changed something:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestPermissionsAllowAndFilter: a token does what its grants allow, on
// the queues its patterns match, through the leader and forwarded by a
// follower (the leader checks the caller, not the follower); ListQueues
// lists only what the caller may browse; Status tells a non-admin only
// where the nodes are.
func TestPermissionsAllowAndFilter(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	l := c.Leader()
	f := c.Followers()[0]
	admin := bearer(ctx, testBootstrap)
	for _, q := range []string{"jobs.a", "jobs.b.c", "other"} {
		if _, err := l.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	tok := mustToken(t, ctx, l, "worker", 0)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "worker", Pattern: "jobs.*", Allow: []string{"produce", "browse"}})
	c.Synced()
	as := bearer(ctx, tok)
	for _, n := range []*testcluster.Node{l, f} {
		if _, err := n.Broker.Enqueue(as, &raftqv1.EnqueueRequest{Queue: "jobs.b.c", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("ok")}}}); err != nil {
			t.Fatalf("enqueue with produce on jobs.* via %s: %v", n.ID, err)
		}
		if _, err := n.Broker.Enqueue(as, &raftqv1.EnqueueRequest{Queue: "other", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("no")}}}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("enqueue on other via %s: %v", n.ID, err)
		}
		if _, err := n.Broker.PurgeQueue(as, &raftqv1.PurgeQueueRequest{Name: "jobs.a"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("purge without manage via %s: %v", n.ID, err)
		}
		qs, err := n.Broker.ListQueues(as, &raftqv1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, q := range qs.Queues {
			names = append(names, q.GetName())
		}
		if fmt.Sprint(names) != "[jobs.a jobs.a.dlq jobs.b.c jobs.b.c.dlq]" {
			t.Fatalf("ListQueues for worker via %s: %v", n.ID, names)
		}
		st, err := n.Admin.Status(as, &raftqv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.LeaderAddr != l.Addrs.GRPC || len(st.Nodes) != 2 || st.AppliedIndex != 0 || st.Nodes[0].RaftAddr != "" || !st.Withheld {
			t.Fatalf("Status for a non-admin: %v", st)
		}
		who, err := raftqv1.NewAuthClient(n.Conn).WhoAmI(as, &raftqv1.WhoAmIRequest{})
		if err != nil || who.Identity != "worker" || who.Kind != "token" || who.Admin || len(who.Grants) != 1 {
			t.Fatalf("WhoAmI via %s: %v %v", n.ID, who, err)
		}
	}
	st, err := f.Admin.Status(admin, &raftqv1.StatusRequest{})
	if err != nil || st.AppliedIndex == 0 || st.Nodes[0].RaftAddr == "" || st.Withheld {
		t.Fatalf("Status for an admin: %v %v", st, err)
	}
	info, err := l.Broker.GetQueue(as, &raftqv1.GetQueueRequest{Name: "jobs.b.c"})
	if err != nil || info.Queue.Stats.GetReady() != 2 {
		t.Fatalf("the two enqueues (one forwarded) did not both land: %v %v", info, err)
	}
	// A Lease stream is listed with its caller's identity.
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "worker", Pattern: "jobs.b.c", Allow: []string{"consume"}})
	c.Synced()
	lctx, cancel := context.WithCancel(as)
	defer cancel()
	if _, err := l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "jobs.b.c", MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the consumer listed with its identity", func() error {
		cs, err := l.Broker.ListConsumers(as, &raftqv1.ListConsumersRequest{Queue: "jobs.b.c"})
		if err != nil {
			return err
		}
		if len(cs.Consumers) != 1 || cs.Consumers[0].Identity != "worker" {
			return fmt.Errorf("consumers %v", cs.Consumers)
		}
		return nil
	})
	cancel()
	// Taking the grant away takes the permission away at once.
	if _, err := raftqv1.NewAuthClient(f.Conn).Ungrant(admin, &raftqv1.UngrantRequest{Identity: "worker", Pattern: "jobs.*"}); err != nil {
		t.Fatal(err)
	}
	c.Synced()
	for _, n := range []*testcluster.Node{l, f} {
		if _, err := n.Broker.GetQueue(as, &raftqv1.GetQueueRequest{Name: "jobs.a"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("browse after ungrant via %s: %v", n.ID, err)
		}
	}
}

// TestLeaseTokenForgeryRefused: knowing a lease's log index (Status shows
// the applied index) is not enough to settle it: the tokens an index
// implies are refused and change nothing; the delivered token works.
func TestLeaseTokenForgeryRefused(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	n := c.Nodes[0]
	if _, err := n.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}}); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := n.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: "q", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := recvN(t, s, 1)[0]
	applied := n.State().Reader().AppliedIndex()
	before := testcluster.StateDigest(t, n.State())
	for idx := applied; idx+64 > applied && idx > 0; idx-- {
		for _, pos := range []uint64{0, 1} {
			forged := transport.FormatID(idx<<20 | pos)
			if forged == d.LeaseToken {
				t.Fatalf("the delivered token %s is the index token of entry %d", forged, idx)
			}
			for _, op := range []func() (*raftqv1.ItemResult, error){
				func() (*raftqv1.ItemResult, error) {
					r, err := n.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "q", Acks: []*raftqv1.LeaseRef{{MessageId: d.Id, LeaseToken: forged}}})
					return r.GetResults()[0], err
				},
				func() (*raftqv1.ItemResult, error) {
					r, err := n.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "q", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: forged}}})
					return r.GetResults()[0], err
				},
				func() (*raftqv1.ItemResult, error) {
					r, err := n.Broker.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Queue: "q", Leases: []*raftqv1.LeaseRef{{MessageId: d.Id, LeaseToken: forged}}})
					return r.GetResults()[0], err
				},
			} {
				res, err := op()
				if err != nil || res.Ok || codes.Code(res.Code) != codes.FailedPrecondition {
					t.Fatalf("forged token %s: %v %v", forged, res, err)
				}
			}
		}
	}
	if testcluster.StateDigest(t, n.State()) != before {
		t.Fatal("forged settlements changed the state")
	}
	r, err := n.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "q", Acks: []*raftqv1.LeaseRef{refOf(d)}})
	if err != nil || !r.Results[0].Ok {
		t.Fatalf("ack with the delivered token: %v %v", r, err)
	}
}

// lockedBuffer collects a node's log lines from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAuditLinesCarryNoSecret: admin actions and auth changes each write
// an audit line (identity, action, target, result), refusals too; no log
// line of any node, at any level, carries a token, while one is created,
// used (also forwarded), refused and revoked.
func TestAuditLinesCarryNoSecret(t *testing.T) {
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2, auth: auth.ModeToken, bootstrapToken: testBootstrap, logger: logger})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	l, f := c.Leader(), c.Followers()[0]
	admin := bearer(ctx, testBootstrap)
	// Identity writes are the meta group's: through a node that does not
	// lead it, they are forwarded.
	mf := c.Nodes[0]
	if mf.Host.Meta().Raft().IsLeader() {
		mf = c.Nodes[1]
	}
	ac := raftqv1.NewAuthClient(mf.Conn)
	tok, err := ac.CreateToken(admin, &raftqv1.CreateTokenRequest{Name: "alice-1", Identity: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Grant(admin, &raftqv1.GrantRequest{Identity: "alice", Pattern: "a.*", Allow: []string{"manage"}}); err != nil {
		t.Fatal(err)
	}
	as := bearer(ctx, tok.Token)
	c.Synced() // the follower knows the token once it applied its entry
	if _, err := f.Broker.CreateQueue(as, &raftqv1.CreateQueueRequest{Name: "a.q"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admin.Snapshot(as, &raftqv1.SnapshotRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("snapshot as alice: %v", err)
	}
	if _, err := ac.RevokeToken(admin, &raftqv1.RevokeTokenRequest{Name: "alice-1"}); err != nil {
		t.Fatal(err)
	}
	c.Synced()
	if _, err := f.Broker.DeleteQueue(as, &raftqv1.DeleteQueueRequest{Name: "a.q"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("delete with a revoked token: %v", err)
	}
	out := logs.String()
	for _, secret := range []string{tok.Token, strings.TrimPrefix(tok.Token, "rqt_"), testBootstrap} {
		if strings.Contains(out, secret) {
			t.Fatalf("a log line carries a token")
		}
	}
	for _, want := range []string{
		`"component":"audit","identity":"bootstrap","kind":"bootstrap","action":"CreateToken","service":"Auth","target":"alice-1 for alice","result":"OK"`,
		`"action":"Grant","service":"Auth","target":"alice a.* manage","result":"OK"`,
		`"identity":"alice","kind":"token","action":"CreateQueue","service":"Broker","target":"a.q","result":"OK"`,
		`"identity":"alice","kind":"token","action":"Snapshot","service":"Cluster","target":"","result":"PermissionDenied"`,
		`"action":"RevokeToken","service":"Auth","target":"alice-1","result":"OK"`,
		`"identity":"","kind":"","action":"DeleteQueue","service":"Broker","target":"a.q","result":"Unauthenticated"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no audit line with %s", want)
		}
	}
	// The forwarded CreateToken is audited on meta's leader as the
	// caller, naming the node it came through.
	if !strings.Contains(out, `"action":"CreateToken","service":"Auth","target":"alice-1 for alice","result":"OK","forwarded_by":"`+mf.ID+`"`) {
		t.Error("the leader's audit line of a forwarded call does not name the follower")
	}
}

// TestHTTPPortNeedsATokenWithAuthOn: the node's HTTP port, with auth on,
// answers only /healthz and /readyz without a token, serves /metrics to
// an admin, and has no pprof unless asked for.
func TestHTTPPortNeedsATokenWithAuthOn(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	h := c.Nodes[0].API().HTTPHandler()
	get := func(path, token string) int {
		r := httptest.NewRequest("GET", path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/status", "", 401},
		{"/metrics", "rqt_wrong", 401},
		{"/metrics", testBootstrap, 200},
		{"/status", testBootstrap, 200},
		{"/debug/pprof/", testBootstrap, 404}, // not without --pprof
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s (token %v): %d, want %d", tc.path, tc.token != "", got, tc.want)
		}
	}
	// A client pointed at this port by mistake learns, without a token,
	// that it is raftq's HTTP port and where the node's gRPC API is.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
	if got := w.Header().Get(transport.GRPCAddrHeader); got != c.Nodes[0].Addrs.GRPC {
		t.Errorf("/healthz %s = %q, want the node's gRPC address %q", transport.GRPCAddrHeader, got, c.Nodes[0].Addrs.GRPC)
	}
}

// TestCertificateIdentitiesOverTLS: with TLS and token auth a client
// certificate authenticates as its common name, also through a follower
// (which vouches for it with its node certificate); identity headers a
// client sends are ignored; a node's own calls (its node certificate)
// work without any token.
func TestCertificateIdentitiesOverTLS(t *testing.T) {
	p := testcluster.NewPKI(t)
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2, tls: p, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	l, f := c.Leader(), c.Followers()[0]
	admin := bearer(ctx, testBootstrap)
	if _, err := l.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: "jobs.a"}); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "carol", Pattern: "jobs.*", Allow: []string{"produce"}})
	c.Synced()
	carol := dialTLS(t, f.Addrs.GRPC, p.ClientCreds(t, "carol"))
	if _, err := raftqv1.NewBrokerClient(carol).Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs.a", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}); err != nil {
		t.Fatalf("carol's forwarded enqueue: %v", err)
	}
	who, err := raftqv1.NewAuthClient(carol).WhoAmI(ctx, &raftqv1.WhoAmIRequest{})
	if err != nil || who.Identity != "carol" || who.Kind != "certificate" {
		t.Fatalf("WhoAmI: %v %v", who, err)
	}
	forged := metadata.AppendToOutgoingContext(ctx, "raftq-identity", "n1", "raftq-identity-kind", "node", "raftq-identity-admin", "true")
	for _, n := range []*testcluster.Node{l, f} {
		conn := dialTLS(t, n.Addrs.GRPC, p.ClientCreds(t, "carol"))
		if _, err := raftqv1.NewBrokerClient(conn).PurgeQueue(forged, &raftqv1.PurgeQueueRequest{Name: "jobs.a"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("carol with forged node identity headers on %s: %v", n.ID, err)
		}
	}
	// Verify asks every node for its digest with the caller's identity;
	// an admin certificate is not needed for the nodes' own calls.
	v, err := f.Admin.Verify(admin, &raftqv1.VerifyRequest{})
	if err != nil || !v.Consistent {
		t.Fatalf("verify: %v %v", v, err)
	}
	if info, err := l.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "jobs.a"}); err != nil || info.Queue.Stats.Ready != 1 {
		t.Fatalf("after the forged purges: %v %v", info, err)
	}
}

func dialTLS(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestDashboardChecksPermissions: the dashboard on the HTTP port calls
// the broker's handlers directly, so it checks each call as the gRPC
// method it stands for: a token that may browse jobs.* sees only those
// queues, cannot open another queue's page, and cannot redrive without
// manage.
func TestDashboardChecksPermissions(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	n := c.Nodes[0]
	for _, q := range []string{"jobs.a", "secret"} {
		if _, err := n.Broker.CreateQueue(bearer(ctx, testBootstrap), &raftqv1.CreateQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	tok := mustToken(t, ctx, n, "viewer", 0)
	mustGrant(t, ctx, n, &raftqv1.GrantRequest{Identity: "viewer", Pattern: "jobs.*", Allow: []string{"browse"}})
	h := n.API().HTTPHandler()
	do := func(method, path, token string) (int, string) {
		r := httptest.NewRequest(method, path, strings.NewReader(""))
		r.Header.Set("Authorization", "Bearer "+token)
		if method == "POST" {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	code, body := do("GET", "/queues", tok)
	if code != 200 || !strings.Contains(body, "jobs.a") || strings.Contains(body, "secret") {
		t.Fatalf("GET /queues as viewer: %d, lists secret: %v", code, strings.Contains(body, "secret"))
	}
	if code, _ := do("GET", "/queues/secret", tok); code != 403 {
		t.Fatalf("GET /queues/secret as viewer: %d", code)
	}
	before := testcluster.StateDigest(t, n.State())
	if code, _ := do("POST", "/queues/jobs.a/redrive", tok); code != 403 {
		t.Fatalf("redrive without manage: %d", code)
	}
	// Every change the pages offer is the API's method with its
	// permission: browse alone may do none of them, and is told which
	// permission it lacks in the API's words.
	for _, path := range []string{
		"/queues?name=jobs.new",
		"/queues/jobs.a/update?max_deliveries=9",
		"/queues/jobs.a/purge?confirm=jobs.a",
		"/queues/jobs.a/delete?confirm=jobs.a",
		"/queues/jobs.a/publish?payload=x",
		"/queues/jobs.a/get",
		"/queues/jobs.a/nack?id=0000000000000001&lease_token=x",
	} {
		p, query, _ := strings.Cut(path, "?")
		r := httptest.NewRequest("POST", p, strings.NewReader(query))
		r.Header.Set("Authorization", "Bearer "+tok)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 403 || !strings.Contains(w.Body.String(), "viewer lacks") {
			t.Errorf("POST %s as viewer: %d\n%s", path, w.Code, w.Body.String())
		}
	}
	if testcluster.StateDigest(t, n.State()) != before {
		t.Fatal("a refused change changed the state")
	}
	if code, body := do("GET", "/queues", testBootstrap); code != 200 || !strings.Contains(body, "secret") {
		t.Fatalf("GET /queues as admin: %d", code)
	}
}

// TestEnqueueStreamDeniesOneRequestNotTheStream: on one EnqueueStream, a
// request for a queue the caller may not produce to is answered
// PERMISSION_DENIED (naming the permission and the queue) and changes
// nothing, while the requests before and after it, on the same stream,
// are served: the stream stays open. Through the leader and through a
// follower that forwards.
func TestEnqueueStreamDeniesOneRequestNotTheStream(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	l := c.Leader()
	admin := bearer(ctx, testBootstrap)
	for _, q := range []string{"jobs.a", "other"} {
		if _, err := l.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	tok := mustToken(t, ctx, l, "producer", 0)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "producer", Pattern: "jobs.*", Allow: []string{"produce"}})
	c.Synced()

	for _, n := range []*testcluster.Node{l, c.Followers()[0]} {
		t.Run("via "+n.ID, func(t *testing.T) {
			sctx, cancel := context.WithCancel(bearer(ctx, tok))
			defer cancel()
			s, err := n.Broker.EnqueueStream(sctx)
			if err != nil {
				t.Fatal(err)
			}
			// One request at a time, so each answer is matched to it
			// and the stream is seen open after the refusal.
			for _, step := range []struct {
				seq   uint64
				queue string
				code  codes.Code
			}{
				{1, "jobs.a", codes.OK},
				{2, "other", codes.PermissionDenied},
				{3, "jobs.a", codes.OK},
				{4, "other", codes.PermissionDenied},
				{5, "jobs.a", codes.OK},
			} {
				req := &raftqv1.EnqueueStreamRequest{Seq: step.seq, Request: &raftqv1.EnqueueRequest{Queue: step.queue,
					Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("m")}}}}
				if err := s.Send(req); err != nil {
					t.Fatalf("seq %d: send: %v (the stream ended)", step.seq, err)
				}
				r, err := s.Recv()
				if err != nil {
					t.Fatalf("seq %d: the stream ended: %v", step.seq, err)
				}
				got := status.FromProto(r.GetError())
				if r.GetSeq() != step.seq || got.Code() != step.code {
					t.Fatalf("seq %d: answer seq %d, %v; want %s", step.seq, r.GetSeq(), got.Err(), step.code)
				}
				if step.code == codes.OK && len(r.GetResponse().GetMessageIds()) != 1 {
					t.Fatalf("seq %d: %v", step.seq, r)
				}
				if step.code == codes.PermissionDenied && (!strings.Contains(got.Message(), "produce") || !strings.Contains(got.Message(), step.queue)) {
					t.Fatalf("seq %d: the refusal does not name produce on %s: %q", step.seq, step.queue, got.Message())
				}
			}
			if err := s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("after CloseSend the stream ends cleanly, got %v", err)
			}
		})
	}
	c.Synced()
	for q, want := range map[string]int64{"jobs.a": 6, "other": 0} {
		info, err := l.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: q})
		if err != nil {
			t.Fatal(err)
		}
		if got := info.GetQueue().GetStats().GetReady(); got != want {
			t.Errorf("%s holds %d messages, want %d", q, got, want)
		}
	}
}
