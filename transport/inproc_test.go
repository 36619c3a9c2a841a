package transport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
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

func testStatus(t *testing.T, c *inprocCluster) {
	l := c.leader()
	for _, n := range c.nodes {
		// Polled: under load gossip may briefly call a peer suspect.
		waitUntil(t, 10*time.Second, n.id+"'s status", func() error {
			st, err := n.admin.Status(tctx(t, 5*time.Second), &raftqv1.StatusRequest{})
			if err != nil {
				return fmt.Errorf("Status: %w", err)
			}
			if st.LeaderId != l.id || st.LeaderAddr != l.addr || st.Term == 0 || len(st.Nodes) != 3 {
				return fmt.Errorf("Status = %v, want leader %s at %s and 3 nodes", st, l.id, l.addr)
			}
			for _, nd := range st.Nodes {
				want := "follower"
				if nd.Id == l.id {
					want = "leader"
				}
				if nd.Suffrage != "voter" || nd.State != want || !nd.Healthy || nd.GrpcAddr != c.byID(nd.Id).addr || nd.RaftAddr == "" {
					return fmt.Errorf("Status node %v, want a healthy voter %s at %s", nd, want, c.byID(nd.Id).addr)
				}
				// Each node knows only its own applied index; the one asked
				// collects the others'.
				if nd.AppliedIndex == 0 {
					return fmt.Errorf("Status via %s: no applied index for %s", n.id, nd.Id)
				}
				if nd.MaxLogVersion != fsm.MaxLogVersion {
					return fmt.Errorf("Status via %s: %s advertises log version %d, want %d", n.id, nd.Id, nd.MaxLogVersion, fsm.MaxLogVersion)
				}
			}
			// Every voter runs this build, so the cluster version rose to it.
			if st.ClusterVersion != fsm.MaxLogVersion {
				return fmt.Errorf("Status via %s: cluster version %d, want %d", n.id, st.ClusterVersion, fsm.MaxLogVersion)
			}
			return nil
		})
		local, err := n.admin.Status(tctx(t, 5*time.Second), &raftqv1.StatusRequest{LocalOnly: true})
		if err != nil {
			t.Fatalf("local Status: %v", err)
		}
		for _, nd := range local.Nodes {
			if (nd.Id == n.id) != (nd.AppliedIndex > 0) {
				t.Fatalf("local-only Status via %s: %s applied index %d (only its own is known)", n.id, nd.Id, nd.AppliedIndex)
			}
		}
	}
}

func testVerify(t *testing.T, c *inprocCluster) {
	for _, n := range c.nodes {
		// An unreachable node (listed with an error) is retried; digests
		// that differ are not.
		waitUntil(t, 20*time.Second, "Verify via "+n.id, func() error {
			v, err := n.admin.Verify(tctx(t, 10*time.Second), &raftqv1.VerifyRequest{})
			if err != nil {
				return fmt.Errorf("Verify: %w", err)
			}
			if len(v.Nodes) != 3 {
				t.Fatalf("%s: Verify = %v, want 3 nodes", n.id, v)
			}
			for _, nd := range v.Nodes {
				if nd.Error != "" {
					return fmt.Errorf("node %s: %s", nd.Id, nd.Error)
				}
			}
			for _, nd := range v.Nodes {
				if !v.Consistent || nd.Digest == "" || nd.Digest != v.Nodes[0].Digest || !nd.CountersOk || nd.AppliedIndex == 0 ||
					nd.AppliedIndex != v.Nodes[0].AppliedIndex {
					t.Fatalf("%s: Verify = %v: node %v differs from %v", n.id, v, nd, v.Nodes[0])
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
	call       func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error)
}

func testValidation(t *testing.T, c *inprocCluster) {
	l := c.leader()
	ctx := tctx(t, time.Minute)

	// Fixtures: "v" (max_message_bytes 100) with one leased and one ready
	// message, "lim" full at max_depth 1, "limb" near max_bytes, and
	// "fill" holding most of the node-wide max_queued_bytes.
	mustCreate(t, l, "v", &raftqv1.QueueConfig{MaxMessageBytes: 100, VisibilityTimeoutMs: 60_000})
	mustCreate(t, l, "lim", &raftqv1.QueueConfig{MaxDepth: 1})
	mustCreate(t, l, "limb", &raftqv1.QueueConfig{MaxBytes: 10})
	mustCreate(t, l, "fill", nil)
	ids := mustEnqueue(t, l, "v", []byte("leased"), []byte("ready"))
	mustEnqueue(t, l, "lim", []byte("x"))
	mustEnqueue(t, l, "limb", []byte("12345678"))
	mustEnqueue(t, l, "fill", make([]byte, 60<<10))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "v", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	held := recvN(t, s, 1)[0]
	if held.Id != ids[0] {
		t.Fatalf("leased %s, want %s", held.Id, ids[0])
	}
	readyID := ids[1]
	unknownID := FormatID(999_999 << 20)
	wrongToken := FormatID(1)
	if held.LeaseToken == wrongToken {
		t.Fatal("test assumption broken: the lease token is 1")
	}

	long := strings.Repeat("x", 256)
	msgs := func(ms ...*raftqv1.EnqueueMessage) *raftqv1.EnqueueRequest {
		return &raftqv1.EnqueueRequest{Queue: "v", Messages: ms}
	}
	nMsgs := func(n int) []*raftqv1.EnqueueMessage {
		out := make([]*raftqv1.EnqueueMessage, n)
		for i := range out {
			out[i] = &raftqv1.EnqueueMessage{}
		}
		return out
	}
	nRefs := func(n int) []*raftqv1.LeaseRef {
		out := make([]*raftqv1.LeaseRef, n)
		for i := range out {
			out[i] = &raftqv1.LeaseRef{MessageId: unknownID, LeaseToken: wrongToken}
		}
		return out
	}
	nNacks := func(n int) []*raftqv1.NackItem {
		out := make([]*raftqv1.NackItem, n)
		for i := range out {
			out[i] = &raftqv1.NackItem{MessageId: unknownID, LeaseToken: wrongToken}
		}
		return out
	}
	manyHeaders := map[string]string{}
	for i := range fsm.MaxHeaders + 1 {
		manyHeaders[fmt.Sprint(i)] = "v"
	}
	manyKeys := make([]string, fsm.MaxThrottleKeys+1)
	for i := range manyKeys {
		manyKeys[i] = fmt.Sprint("k", i)
	}
	create := func(name string, cfg *raftqv1.QueueConfig) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Config: cfg})
			return nil, err
		}
	}
	update := func(name string, cfg *raftqv1.QueueConfig, paths ...string) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: name, Config: cfg, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
			return nil, err
		}
	}
	enqueue := func(req *raftqv1.EnqueueRequest) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.Enqueue(ctx, req)
			return nil, err
		}
	}
	ack := func(queue string, refs ...*raftqv1.LeaseRef) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			r, err := b.Ack(ctx, &raftqv1.AckRequest{Queue: queue, Acks: refs})
			return r.GetResults(), err
		}
	}
	nack := func(queue string, items ...*raftqv1.NackItem) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			r, err := b.Nack(ctx, &raftqv1.NackRequest{Queue: queue, Nacks: items})
			return r.GetResults(), err
		}
	}
	extend := func(queue string, by int64, refs ...*raftqv1.LeaseRef) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			r, err := b.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Queue: queue, Leases: refs, ExtendByMs: by})
			return r.GetResults(), err
		}
	}
	lease := func(req *raftqv1.LeaseRequest) func(context.Context, raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
		return func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			return nil, leaseErr(ctx, b, req)
		}
	}
	ref := func(id, tok string) *raftqv1.LeaseRef { return &raftqv1.LeaseRef{MessageId: id, LeaseToken: tok} }
	inv, nf := codes.InvalidArgument, codes.NotFound

	cases := []validationCase{
		// Queue names.
		{name: "create: empty name", code: inv, call: create("", nil)},
		{name: "create: 256-character name", code: inv, call: create(long, nil)},
		{name: "create: space in name", code: inv, call: create("a b", nil)},
		{name: "create: slash in name", code: inv, call: create("a/b", nil)},
		{name: "create: non-ASCII name", code: inv, call: create("queue-é", nil)},
		{name: "create: exists", code: codes.AlreadyExists, call: create("v", nil)},
		// Config ranges.
		{name: "create: negative visibility_timeout_ms", code: inv, call: create("n", &raftqv1.QueueConfig{VisibilityTimeoutMs: -1})},
		{name: "create: negative max_deliveries", code: inv, call: create("n", &raftqv1.QueueConfig{MaxDeliveries: -1})},
		{name: "create: negative max_depth", code: inv, call: create("n", &raftqv1.QueueConfig{MaxDepth: -1})},
		{name: "create: negative max_bytes", code: inv, call: create("n", &raftqv1.QueueConfig{MaxBytes: -1})},
		{name: "create: negative message_ttl_ms", code: inv, call: create("n", &raftqv1.QueueConfig{MessageTtlMs: -1})},
		{name: "create: negative dedup_window_ms", code: inv, call: create("n", &raftqv1.QueueConfig{DedupWindowMs: -1})},
		{name: "create: max_message_bytes over the cap", code: inv, call: create("n", &raftqv1.QueueConfig{MaxMessageBytes: fsm.MaxMessageBytesCap + 1})},
		{name: "create: negative fairness_quantum", code: inv, call: create("n", &raftqv1.QueueConfig{FairnessQuantum: -1})},
		{name: "create: visibility over a year", code: inv, call: create("n", &raftqv1.QueueConfig{VisibilityTimeoutMs: fsm.MaxDurationMs + 1})},
		{name: "create: bad dead_letter_queue name", code: inv, call: create("n", &raftqv1.QueueConfig{DeadLetterQueue: "a b"})},
		{name: "create: throttle rate 0", code: inv, call: create("n", &raftqv1.QueueConfig{Throttles: map[string]*raftqv1.ThrottleRule{"t": {}}})},
		{name: "create: throttle rate NaN", code: inv, call: create("n", &raftqv1.QueueConfig{Throttles: map[string]*raftqv1.ThrottleRule{"t": {RatePerSec: math.NaN()}}})},
		{name: "create: negative throttle burst", code: inv, call: create("n", &raftqv1.QueueConfig{Throttles: map[string]*raftqv1.ThrottleRule{"t": {RatePerSec: 1, Burst: -1}}})},
		{name: "create: empty throttle key", code: inv, call: create("n", &raftqv1.QueueConfig{Throttles: map[string]*raftqv1.ThrottleRule{"": {RatePerSec: 1}}})},
		// UpdateQueue.
		{name: "update: unknown mask path", code: inv, call: update("v", &raftqv1.QueueConfig{}, "nope")},
		{name: "update: unknown config. mask path", code: inv, call: update("v", &raftqv1.QueueConfig{}, "config.nope")},
		{name: "update: negative masked field", code: inv, call: update("v", &raftqv1.QueueConfig{VisibilityTimeoutMs: -5}, "visibility_timeout_ms")},
		{name: "update: bad name", code: inv, call: update("a b", &raftqv1.QueueConfig{}, "max_depth")},
		{name: "update: unknown queue", code: nf, call: update("nope", &raftqv1.QueueConfig{MaxDepth: 5}, "max_depth")},
		// Delete, get, list, purge, peek, redrive.
		{name: "delete: unknown queue", code: nf, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "nope"})
			return nil, err
		}},
		{name: "delete: bad name", code: inv, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "a/b"})
			return nil, err
		}},
		{name: "delete: dead-letter queue in use", code: codes.FailedPrecondition, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "v" + fsm.DLQSuffix})
			return nil, err
		}},
		{name: "get: unknown queue", code: nf, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "nope"})
			return nil, err
		}},
		{name: "get: empty name", code: inv, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.GetQueue(ctx, &raftqv1.GetQueueRequest{})
			return nil, err
		}},
		{name: "list: overlong prefix", code: inv, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.ListQueues(ctx, &raftqv1.ListQueuesRequest{Prefix: long})
			return nil, err
		}},
		{name: "purge: unknown queue", code: nf, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "nope"})
			return nil, err
		}},
		{name: "peek: negative limit", code: inv, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.Peek(ctx, &raftqv1.PeekRequest{Queue: "v", Limit: -1})
			return nil, err
		}},
		{name: "peek: limit over 1000", code: inv, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.Peek(ctx, &raftqv1.PeekRequest{Queue: "v", Limit: 1001})
			return nil, err
		}},
		{name: "peek: unknown queue", code: nf, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.Peek(ctx, &raftqv1.PeekRequest{Queue: "nope"})
			return nil, err
		}},
		{name: "redrive: negative limit", code: inv, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "v", Limit: -1})
			return nil, err
		}},
		{name: "redrive: unknown queue", code: nf, call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "nope"})
			return nil, err
		}},
		// Enqueue.
		{name: "enqueue: unknown queue", code: nf, call: enqueue(&raftqv1.EnqueueRequest{Queue: "nope", Messages: nMsgs(1)})},
		{name: "enqueue: bad queue name", code: inv, call: enqueue(&raftqv1.EnqueueRequest{Queue: "a b", Messages: nMsgs(1)})},
		{name: "enqueue: zero messages", code: inv, call: enqueue(msgs())},
		{name: "enqueue: 1001 messages", code: inv, call: enqueue(msgs(nMsgs(MaxBatch + 1)...))},
		{name: "enqueue: payload over the queue's limit", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{Payload: make([]byte, 101)}))},
		{name: "enqueue: one bad message fails the batch", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{Payload: []byte("ok")}, &raftqv1.EnqueueMessage{DelayMs: -1}))},
		{name: "enqueue: negative delay_ms", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{DelayMs: -1}))},
		{name: "enqueue: delay_ms over a year", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{DelayMs: fsm.MaxDurationMs + 1}))},
		{name: "enqueue: negative ttl_ms", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{TtlMs: -1}))},
		{name: "enqueue: weight over the limit", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{Weight: fsm.MaxWeight + 1}))},
		{name: "enqueue: overlong fairness_key", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{FairnessKey: long}))},
		{name: "enqueue: overlong dedup_id", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{DedupId: long}))},
		{name: "enqueue: too many throttle_keys", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{ThrottleKeys: manyKeys}))},
		{name: "enqueue: empty throttle key", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{ThrottleKeys: []string{""}}))},
		{name: "enqueue: too many headers", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{Headers: manyHeaders}))},
		{name: "enqueue: headers over 16 KiB", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{Headers: map[string]string{"h": strings.Repeat("x", fsm.MaxHeaderBytes)}}))},
		// Admission control.
		{name: "enqueue: max_depth reached", code: codes.ResourceExhausted, call: enqueue(&raftqv1.EnqueueRequest{Queue: "lim", Messages: nMsgs(1)})},
		{name: "enqueue: max_bytes reached", code: codes.ResourceExhausted, call: enqueue(&raftqv1.EnqueueRequest{Queue: "limb", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("abc")}}})},
		{name: "enqueue: node-wide max queued bytes reached", code: codes.ResourceExhausted, call: enqueue(&raftqv1.EnqueueRequest{Queue: "fill", Messages: []*raftqv1.EnqueueMessage{{Payload: make([]byte, 5000)}}})},
		// Ack.
		{name: "ack: zero items", code: inv, call: ack("v")},
		{name: "ack: 1001 items", code: inv, call: ack("v", nRefs(MaxBatch+1)...)},
		{name: "ack: malformed message id", code: inv, call: ack("v", ref("zz", wrongToken))},
		{name: "ack: malformed lease token", code: inv, call: ack("v", ref(held.Id, "not-a-token"))},
		{name: "ack: empty lease token", code: inv, call: ack("v", ref(held.Id, ""))},
		{name: "ack: bad queue name", code: inv, call: ack("a b", refOf(held))},
		{name: "ack: unknown queue", code: nf, call: ack("nope", refOf(held))},
		{name: "ack: stale token", item: codes.FailedPrecondition, call: ack("v", ref(held.Id, wrongToken))},
		{name: "ack: message not leased", item: codes.FailedPrecondition, call: ack("v", ref(readyID, held.LeaseToken))},
		{name: "ack: unknown message id", item: nf, call: ack("v", ref(unknownID, held.LeaseToken))},
		{name: "ack: lease of another queue", item: nf, call: ack("lim", refOf(held))},
		// Nack.
		{name: "nack: zero items", code: inv, call: nack("v")},
		{name: "nack: 1001 items", code: inv, call: nack("v", nNacks(MaxBatch+1)...)},
		{name: "nack: negative delay_ms", code: inv, call: nack("v", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: held.LeaseToken, DelayMs: -1})},
		{name: "nack: overlong reason", code: inv, call: nack("v", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: held.LeaseToken, Reason: strings.Repeat("r", 1025)})},
		{name: "nack: malformed id", code: inv, call: nack("v", &raftqv1.NackItem{MessageId: "12", LeaseToken: held.LeaseToken})},
		{name: "nack: unknown queue", code: nf, call: nack("nope", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: held.LeaseToken})},
		{name: "nack: stale token", item: codes.FailedPrecondition, call: nack("v", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: wrongToken, DeadLetter: true})},
		{name: "nack: unknown message id", item: nf, call: nack("v", &raftqv1.NackItem{MessageId: unknownID, LeaseToken: held.LeaseToken})},
		// ExtendLease.
		{name: "extend: zero items", code: inv, call: extend("v", 1000)},
		{name: "extend: negative extend_by_ms", code: inv, call: extend("v", -1, refOf(held))},
		{name: "extend: extend_by_ms over a year", code: inv, call: extend("v", fsm.MaxDurationMs+1, refOf(held))},
		{name: "extend: malformed token", code: inv, call: extend("v", 1000, ref(held.Id, "xyz"))},
		{name: "extend: unknown queue", code: nf, call: extend("nope", 1000, refOf(held))},
		{name: "extend: stale token", item: codes.FailedPrecondition, call: extend("v", 1000, ref(held.Id, wrongToken))},
		{name: "extend: unknown message id", item: nf, call: extend("v", 1000, ref(unknownID, held.LeaseToken))},
		// Lease stream requests.
		{name: "lease: bad queue name", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "a b"})},
		{name: "lease: negative max_in_flight", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", MaxInFlight: -1})},
		{name: "lease: max_in_flight over the limit", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", MaxInFlight: MaxInFlight + 1})},
		{name: "lease: negative visibility_timeout_ms", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", VisibilityTimeoutMs: -1})},
		{name: "lease: overlong consumer_name", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", ConsumerName: long})},
		{name: "lease: negative limit", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", Limit: -1})},
		{name: "lease: unknown queue", code: nf, leaderOnly: true, call: lease(&raftqv1.LeaseRequest{Queue: "nope"})},
	}

	f := c.followers()[0]
	for _, tc := range cases {
		for _, target := range []*inprocNode{l, f} {
			if tc.leaderOnly && target != l {
				continue
			}
			role := "leader"
			if target != l {
				role = "follower"
			}
			t.Run(tc.name+" on "+role, func(t *testing.T) {
				before := c.digests()
				res, err := tc.call(tctx(t, 10*time.Second), target.broker)
				if tc.item == codes.OK {
					if status.Code(err) != tc.code {
						t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
					}
					if status.Convert(err).Message() == "" {
						t.Fatal("error without a message")
					}
				} else {
					if err != nil {
						t.Fatalf("call failed: %v; want item result %v", err, tc.item)
					}
					if len(res) != 1 || res[0].Ok || codes.Code(res[0].Code) != tc.item || res[0].Error == "" {
						t.Fatalf("results %v, want one item with %v", res, tc.item)
					}
				}
				if after := c.digests(); after != before {
					t.Fatal("bad input changed the state")
				}
			})
		}
	}
	for _, n := range c.nodes {
		if err := n.state.Verify(); err != nil {
			t.Fatalf("%s: counters: %v", n.id, err)
		}
	}

	// The lease refused with stale tokens is intact: the real token works.
	if r, err := f.broker.Ack(ctx, &raftqv1.AckRequest{Queue: "v", Acks: []*raftqv1.LeaseRef{refOf(held)}}); err != nil || !r.Results[0].Ok {
		t.Fatalf("ack with the real token = %v, %v", r, err)
	}
	for _, q := range []string{"v", "lim", "limb", "fill"} {
		if _, err := l.broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
}

func testForwarding(t *testing.T, c *inprocCluster) {
	l, fs := c.leader(), c.followers()
	f, f2 := fs[0], fs[1]
	ctx := tctx(t, time.Minute)

	// Unary writes on a follower are forwarded to the leader.
	if _, err := f.broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "fwd", Config: &raftqv1.QueueConfig{VisibilityTimeoutMs: 60_000}}); err != nil {
		t.Fatalf("CreateQueue via follower: %v", err)
	}
	er, err := f.broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{
		{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")},
	}})
	if err != nil || len(er.GetMessageIds()) != 3 {
		t.Fatalf("Enqueue via follower = %v, %v", er, err)
	}
	gq, err := f2.broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "fwd"})
	if err != nil || gq.Queue.Stats.Ready != 3 {
		t.Fatalf("GetQueue via follower = %v, %v", gq, err)
	}
	pk, err := f.broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "fwd"})
	if err != nil || len(pk.Messages) != 3 || pk.Messages[0].Id != er.MessageIds[0] {
		t.Fatalf("Peek via follower = %v, %v", pk, err)
	}

	// Lease streams are not forwarded: a follower redirects to the leader.
	for _, n := range fs {
		checkRedirect(t, leaseErr(ctx, n.broker, &raftqv1.LeaseRequest{Queue: "fwd"}), ReasonNotLeader, l)
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "fwd", MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 3)
	xr, err := f.broker.ExtendLease(ctx, &raftqv1.ExtendLeaseRequest{Queue: "fwd", Leases: refsOf(ds), ExtendByMs: 120_000})
	if err != nil || len(xr.Results) != 3 || !xr.Results[0].Ok || xr.DeadlinesMs[0] <= ds[0].LeaseDeadlineMs {
		t.Fatalf("ExtendLease via follower = %v, %v (deadline was %d)", xr, err, ds[0].LeaseDeadlineMs)
	}
	nr, err := f2.broker.Nack(ctx, &raftqv1.NackRequest{Queue: "fwd", Nacks: []*raftqv1.NackItem{{MessageId: ds[0].Id, LeaseToken: ds[0].LeaseToken}}})
	if err != nil || !nr.Results[0].Ok {
		t.Fatalf("Nack via follower = %v, %v", nr, err)
	}
	again := recvN(t, s, 1)[0]
	if again.Id != ds[0].Id || again.Attempt != 2 {
		t.Fatalf("after nack got %s attempt %d, want %s attempt 2", again.Id, again.Attempt, ds[0].Id)
	}
	ar, err := f.broker.Ack(ctx, &raftqv1.AckRequest{Queue: "fwd", Acks: refsOf([]*raftqv1.Delivery{again, ds[1], ds[2]})})
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
	before := c.digests()
	gctx := metadata.AppendToOutgoingContext(ctx, forwardedByKey, "n9")
	_, err = f.broker.Enqueue(gctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("loop")}}})
	checkRedirect(t, err, ReasonNotLeader, l)
	_, err = f2.broker.CreateQueue(gctx, &raftqv1.CreateQueueRequest{Name: "loop"})
	checkRedirect(t, err, ReasonNotLeader, l)
	if c.digests() != before {
		t.Fatal("a refused forwarded call changed the state")
	}
	// The leader serves a forwarded call.
	if _, err := l.broker.Enqueue(gctx, &raftqv1.EnqueueRequest{Queue: "fwd", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("served")}}}); err != nil {
		t.Fatalf("forwarded call on the leader: %v", err)
	}

	if r, err := f.broker.PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: "fwd"}); err != nil || r.Purged != 1 {
		t.Fatalf("PurgeQueue via follower = %v, %v", r, err)
	}
	if _, err := f2.broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "fwd"}); err != nil {
		t.Fatalf("DeleteQueue via follower: %v", err)
	}
	c.synced()
	for _, n := range c.nodes {
		if _, err := n.state.GetQueue("fwd"); !errors.Is(err, fsm.ErrQueueNotFound) {
			t.Fatalf("%s still has the queue: %v", n.id, err)
		}
	}
}

// testAdminValidation: operator calls with bad ids get specific codes (not
// Internal) on the leader and through a follower, and change nothing.
func testAdminValidation(t *testing.T, c *inprocCluster) {
	l := c.leader()
	cases := []struct {
		name string
		code codes.Code
		call func(ctx context.Context, a raftqv1.ClusterClient) error
	}{
		{"remove: empty id", codes.InvalidArgument, func(ctx context.Context, a raftqv1.ClusterClient) error {
			_, err := a.RemoveNode(ctx, &raftqv1.RemoveNodeRequest{})
			return err
		}},
		{"remove: unknown node", codes.NotFound, func(ctx context.Context, a raftqv1.ClusterClient) error {
			_, err := a.RemoveNode(ctx, &raftqv1.RemoveNodeRequest{Id: "nope"})
			return err
		}},
		{"remove: the leader", codes.FailedPrecondition, func(ctx context.Context, a raftqv1.ClusterClient) error {
			_, err := a.RemoveNode(ctx, &raftqv1.RemoveNodeRequest{Id: l.id})
			return err
		}},
		{"transfer: unknown node", codes.NotFound, func(ctx context.Context, a raftqv1.ClusterClient) error {
			_, err := a.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{ToId: "nope"})
			return err
		}},
	}
	for _, tc := range cases {
		for _, n := range []*inprocNode{l, c.followers()[0]} {
			t.Run(tc.name+" via "+n.id, func(t *testing.T) {
				before := c.digests()
				if err := tc.call(tctx(t, 10*time.Second), n.admin); status.Code(err) != tc.code {
					t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.code)
				}
				if c.digests() != before {
					t.Fatal("state changed")
				}
			})
		}
	}
	if nl := c.waitStable(10 * time.Second); nl != l {
		t.Fatalf("leader moved from %s to %s", l.id, nl.id)
	}
}

// testRelease: a stream that goes away returns its leases at once (not
// after the visibility timeout), and each such release counts as a
// delivery attempt, so a message that kills its consumers still reaches the
// dead-letter queue after max_deliveries (API.md, Attempts).
func testRelease(t *testing.T, c *inprocCluster) {
	l := c.leader()
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
		s, err := l.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "rel", MaxInFlight: n, ConsumerName: "doomed"})
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
	pk, err := l.broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "rel", DeadLetter: true})
	if err != nil || len(pk.Messages) != n {
		t.Fatalf("dead letters = %v, %v", pk, err)
	}
	for _, d := range pk.Messages {
		if d.Attempt != 2 || d.DeadLetterReason != "max_deliveries" {
			t.Fatalf("dead letter %s: attempt %d reason %q", d.Id, d.Attempt, d.DeadLetterReason)
		}
	}
	if _, err := l.broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "rel"}); err != nil {
		t.Fatal(err)
	}
}

// testLimitAndHandBack: a Lease limit gets exactly that many deliveries
// (no extras whose return would cost attempts), and a delivery handed back
// unprocessed is redelivered without counting as an attempt.
func testLimitAndHandBack(t *testing.T, c *inprocCluster) {
	l, f := c.leader(), c.followers()[0]
	ctx := tctx(t, time.Minute)
	mustCreate(t, l, "lim2", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
	ids := mustEnqueue(t, l, "lim2", []byte("1"), []byte("2"), []byte("3"), []byte("4"), []byte("5"))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "lim2", MaxInFlight: 5, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 2)
	nr, err := f.broker.Nack(ctx, &raftqv1.NackRequest{Queue: "lim2", Nacks: []*raftqv1.NackItem{{MessageId: ds[0].Id, LeaseToken: ds[0].LeaseToken, Unprocessed: true}}})
	if err != nil || !nr.Results[0].Ok {
		t.Fatalf("hand-back = %v, %v", nr, err)
	}
	if ar, err := f.broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lim2", Acks: refsOf(ds[1:])}); err != nil || !ar.Results[0].Ok {
		t.Fatalf("ack = %v, %v", ar, err)
	}
	// The stream has its two: credit came back, but nothing more is granted.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if q := queueInfo(t, l, "lim2"); q.Stats.InFlight != 0 || q.Stats.Ready != 4 || q.Stats.Consumers != 1 {
			t.Fatalf("stream with limit 2 after 2 deliveries: stats %v", q.Stats)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	s2, err := l.broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "lim2", MaxInFlight: 5})
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
	if ar, err := l.broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lim2", Acks: refsOf(rest)}); err != nil || len(ar.Results) != 4 {
		t.Fatalf("ack = %v, %v", ar, err)
	}
	if _, err := l.broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "lim2"}); err != nil {
		t.Fatal(err)
	}
}

// testLeadershipChange: moving leadership ends the old leader's Lease
// streams with a redirect to the new leader, and leases granted by the old
// leader can be acked through the new one.
func testLeadershipChange(t *testing.T, c *inprocCluster) {
	old := c.leader()
	fs := c.followers()
	via, target := fs[0], fs[1]
	ctx := tctx(t, time.Minute)
	mustCreate(t, old, "lc", &raftqv1.QueueConfig{VisibilityTimeoutMs: 600_000})
	mustEnqueue(t, old, "lc", []byte("1"), []byte("2"), []byte("3"))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := old.broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "lc", MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 3)

	// TransferLeadership is forwarded to the leader by a follower.
	tr, err := via.admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{ToId: target.id})
	if err != nil || tr.NewLeaderId != target.id {
		t.Fatalf("TransferLeadership to %s via %s = %v, %v", target.id, via.id, tr, err)
	}
	_, err = s.Recv()
	checkRedirect(t, err, ReasonNotLeader, target)

	if nl := c.waitStable(20 * time.Second); nl != target {
		t.Fatalf("leader is %s, want %s", nl.id, target.id)
	}
	checkRedirect(t, leaseErr(ctx, old.broker, &raftqv1.LeaseRequest{Queue: "lc"}), ReasonNotLeader, target)

	// Leases of the old leader's term are acked on the new leader.
	ar, err := target.broker.Ack(ctx, &raftqv1.AckRequest{Queue: "lc", Acks: refsOf(ds)})
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
	n := c.nodes[0]
	ctx := tctx(t, 30*time.Second)
	calls := map[string]func() error{
		"CreateQueue": func() error {
			_, err := n.broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q"})
			return err
		},
		"Enqueue": func() error {
			_, err := n.broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{}}})
			return err
		},
		"GetQueue": func() error {
			_, err := n.broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "q"})
			return err
		},
		"Lease": func() error { return leaseErr(ctx, n.broker, &raftqv1.LeaseRequest{Queue: "q"}) },
		"TransferLeadership": func() error {
			_, err := n.admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{})
			return err
		},
		"Verify": func() error {
			_, err := n.admin.Verify(ctx, &raftqv1.VerifyRequest{})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call()
			checkRedirect(t, err, ReasonNoLeader, nil)
			if el := time.Since(start); el < wait {
				t.Fatalf("NO_LEADER after %v, before the %v leader wait", el, wait)
			}
		})
	}
	// Status answers locally.
	st, err := n.admin.Status(ctx, &raftqv1.StatusRequest{})
	if err != nil || st.LeaderId != "" {
		t.Fatalf("Status = %v, %v", st, err)
	}
}

func mustCreate(t *testing.T, n *inprocNode, name string, cfg *raftqv1.QueueConfig) {
	t.Helper()
	if _, err := n.broker.CreateQueue(tctx(t, 10*time.Second), &raftqv1.CreateQueueRequest{Name: name, Config: cfg}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func mustEnqueue(t *testing.T, n *inprocNode, queue string, payloads ...[]byte) []string {
	t.Helper()
	req := &raftqv1.EnqueueRequest{Queue: queue}
	for _, p := range payloads {
		req.Messages = append(req.Messages, &raftqv1.EnqueueMessage{Payload: p})
	}
	r, err := n.broker.Enqueue(tctx(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("enqueue to %s: %v", queue, err)
	}
	return r.MessageIds
}

func queueInfo(t *testing.T, n *inprocNode, name string) *raftqv1.QueueInfo {
	t.Helper()
	r, err := n.broker.GetQueue(tctx(t, 10*time.Second), &raftqv1.GetQueueRequest{Name: name})
	if err != nil {
		t.Fatalf("GetQueue %s: %v", name, err)
	}
	return r.Queue
}
