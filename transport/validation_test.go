package transport_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// Bad input on every RPC of the in-process cluster (TestInprocCluster):
// the right code, and nothing changed.

func testValidation(t *testing.T, c *testcluster.Cluster) {
	l := c.Leader()
	ctx := tctx(t, time.Minute)

	// Fixtures: "v" (max_message_bytes 100) with one leased and one ready
	// message, "lim" full at max_depth 1, "limb" near max_bytes, and
	// "fill" holding most of the node-wide max_queued_bytes.
	mustCreate(t, l, "v", &raftqv1.QueueConfig{MaxMessageBytes: 100, VisibilityTimeoutMs: 60_000})
	mustCreate(t, l, "lim", &raftqv1.QueueConfig{MaxDepth: 1})
	mustCreate(t, l, "limb", &raftqv1.QueueConfig{MaxBytes: fsm.MessageOverheadBytes + 10}) // one small message
	mustCreate(t, l, "fill", nil)
	ids := mustEnqueue(t, l, "v", []byte("leased"), []byte("ready"))
	mustEnqueue(t, l, "lim", []byte("x"))
	mustEnqueue(t, l, "limb", []byte("12345678"))
	mustEnqueue(t, l, "fill", make([]byte, 60<<10))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "v", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	held := recvN(t, s, 1)[0]
	if held.Id != ids[0] {
		t.Fatalf("leased %s, want %s", held.Id, ids[0])
	}
	readyID := ids[1]
	unknownID := transport.FormatID(999_999 << 20)
	wrongToken := transport.FormatID(1)
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
		{name: "create: non-ASCII name", code: inv, msg: `character 'ö' outside`, call: create("jöbs", nil)},
		{name: "create: name starting with '-'", code: inv, msg: `starts with '-'`, call: create("-jobs", nil)},
		{name: "create: dead_letter_queue starting with '-'", code: inv, msg: "config.dead_letter_queue", call: create("n", &raftqv1.QueueConfig{DeadLetterQueue: "-d"})},
		{name: "update: dead_letter_queue starting with '-'", code: inv, msg: `starts with '-'`, call: update("v", &raftqv1.QueueConfig{DeadLetterQueue: "-d"}, "dead_letter_queue")},
		{name: "create: exists", code: codes.AlreadyExists, call: create("v", nil)},
		// Config ranges.
		{name: "create: negative visibility_timeout_ms", code: inv, call: create("n", &raftqv1.QueueConfig{VisibilityTimeoutMs: -1})},
		{name: "create: negative max_deliveries", code: inv, call: create("n", &raftqv1.QueueConfig{MaxDeliveries: -1})},
		{name: "create: negative max_depth", code: inv, call: create("n", &raftqv1.QueueConfig{MaxDepth: -1})},
		{name: "create: negative max_bytes", code: inv, call: create("n", &raftqv1.QueueConfig{MaxBytes: -1})},
		{name: "create: negative message_ttl_ms", code: inv, call: create("n", &raftqv1.QueueConfig{MessageTtlMs: -1})},
		{name: "create: negative dedup_window_ms", code: inv, call: create("n", &raftqv1.QueueConfig{DedupWindowMs: -1})},
		{name: "create: max_message_bytes over the cap", code: inv, msg: "the limit is 16777216 (16 MiB)", call: create("n", &raftqv1.QueueConfig{MaxMessageBytes: fsm.MaxMessageBytesCap + 1})},
		{name: "create: negative fairness_quantum", code: inv, call: create("n", &raftqv1.QueueConfig{FairnessQuantum: -1})},
		{name: "create: visibility over a year", code: inv, msg: "(41666.7 days), the limit is 31622400000 (366 days)", call: create("n", &raftqv1.QueueConfig{VisibilityTimeoutMs: 3_600_000_000_000})},
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
		{name: "delete: if_empty of a queue that holds messages", code: codes.FailedPrecondition, msg: "queue v holds 2 messages (1 ready, 0 delayed, 1 in flight)", call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "v", IfEmpty: true})
			return nil, err
		}},
		{name: "delete: if_unused of a queue with a consumer", code: codes.FailedPrecondition, msg: "queue v has 1 consumer(s) attached", call: func(ctx context.Context, b raftqv1.BrokerClient) ([]*raftqv1.ItemResult, error) {
			_, err := b.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "v", IfUnused: true})
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
		{name: "enqueue: 1001 messages", code: inv, call: enqueue(msgs(nMsgs(transport.MaxBatch + 1)...))},
		{name: "enqueue: payload over the queue's limit", code: inv, msg: "messages[0].payload is 101 bytes, the queue's limit (max_message_bytes) is 100 bytes", call: enqueue(msgs(&raftqv1.EnqueueMessage{Payload: make([]byte, 101)}))},
		{name: "enqueue: one bad message fails the batch", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{Payload: []byte("ok")}, &raftqv1.EnqueueMessage{DelayMs: -1}))},
		{name: "enqueue: negative delay_ms", code: inv, call: enqueue(msgs(&raftqv1.EnqueueMessage{DelayMs: -1}))},
		{name: "enqueue: delay_ms over a year", code: inv, msg: "(0 to 366 days)", call: enqueue(msgs(&raftqv1.EnqueueMessage{DelayMs: fsm.MaxDurationMs + 1}))},
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
		{name: "ack: 1001 items", code: inv, call: ack("v", nRefs(transport.MaxBatch+1)...)},
		{name: "ack: malformed message id", code: inv, msg: `acks[0].message_id: invalid argument: message id "zz"`, call: ack("v", ref("zz", wrongToken))},
		{name: "ack: malformed lease token", code: inv, msg: `acks[0].lease_token: invalid argument: lease token "not-a-token" is not 16 hex digits`, call: ack("v", ref(held.Id, "not-a-token"))},
		{name: "ack: empty lease token", code: inv, call: ack("v", ref(held.Id, ""))},
		{name: "ack: bad queue name", code: inv, call: ack("a b", refOf(held))},
		{name: "ack: unknown queue", code: nf, call: ack("nope", refOf(held))},
		{name: "ack: stale token", item: codes.FailedPrecondition, msg: "acks[0]: message " + held.Id + " of queue v: stale or unknown lease token", call: ack("v", ref(held.Id, wrongToken))},
		{name: "ack: message not leased", item: codes.FailedPrecondition, call: ack("v", ref(readyID, held.LeaseToken))},
		{name: "ack: unknown message id", item: nf, msg: "acks[0]: message " + unknownID + " of queue v: message not found", call: ack("v", ref(unknownID, held.LeaseToken))},
		{name: "ack: lease of another queue", item: nf, msg: "of queue lim", call: ack("lim", refOf(held))},
		// Nack.
		{name: "nack: zero items", code: inv, call: nack("v")},
		{name: "nack: 1001 items", code: inv, call: nack("v", nNacks(transport.MaxBatch+1)...)},
		{name: "nack: negative delay_ms", code: inv, call: nack("v", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: held.LeaseToken, DelayMs: -1})},
		{name: "nack: overlong reason", code: inv, call: nack("v", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: held.LeaseToken, Reason: strings.Repeat("r", 1025)})},
		{name: "nack: malformed id", code: inv, call: nack("v", &raftqv1.NackItem{MessageId: "12", LeaseToken: held.LeaseToken})},
		{name: "nack: unknown queue", code: nf, call: nack("nope", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: held.LeaseToken})},
		{name: "nack: stale token", item: codes.FailedPrecondition, msg: "nacks[0]: message " + held.Id + " of queue v:", call: nack("v", &raftqv1.NackItem{MessageId: held.Id, LeaseToken: wrongToken, DeadLetter: true})},
		{name: "nack: unknown message id", item: nf, call: nack("v", &raftqv1.NackItem{MessageId: unknownID, LeaseToken: held.LeaseToken})},
		// ExtendLease.
		{name: "extend: zero items", code: inv, call: extend("v", 1000)},
		{name: "extend: negative extend_by_ms", code: inv, call: extend("v", -1, refOf(held))},
		{name: "extend: extend_by_ms over a year", code: inv, msg: "(0 to 366 days)", call: extend("v", fsm.MaxDurationMs+1, refOf(held))},
		{name: "extend: malformed token", code: inv, msg: `lease token "xyz"`, call: extend("v", 1000, ref(held.Id, "xyz"))},
		{name: "extend: unknown queue", code: nf, call: extend("nope", 1000, refOf(held))},
		{name: "extend: stale token", item: codes.FailedPrecondition, msg: "leases[0]: message " + held.Id + " of queue v:", call: extend("v", 1000, ref(held.Id, wrongToken))},
		{name: "extend: unknown message id", item: nf, call: extend("v", 1000, ref(unknownID, held.LeaseToken))},
		// Lease stream requests.
		{name: "lease: bad queue name", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "a b"})},
		{name: "lease: negative max_in_flight", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", MaxInFlight: -1})},
		{name: "lease: max_in_flight over the limit", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", MaxInFlight: transport.MaxInFlight + 1})},
		{name: "lease: negative visibility_timeout_ms", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", VisibilityTimeoutMs: -1})},
		{name: "lease: overlong consumer_name", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", ConsumerName: long})},
		{name: "lease: negative limit", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", Limit: -1})},
		{name: "lease: negative max_batch_bytes", code: inv, call: lease(&raftqv1.LeaseRequest{Queue: "v", MaxBatchBytes: -1})},
		{name: "lease: unknown queue", code: nf, leaderOnly: true, call: lease(&raftqv1.LeaseRequest{Queue: "nope"})},
	}

	f := c.Followers()[0]
	for _, tc := range cases {
		for _, target := range []*testcluster.Node{l, f} {
			if tc.leaderOnly && target != l {
				continue
			}
			role := "leader"
			if target != l {
				role = "follower"
			}
			t.Run(tc.name+" on "+role, func(t *testing.T) {
				before := c.Digests()
				res, err := tc.call(tctx(t, 10*time.Second), target.Broker)
				if tc.item == codes.OK {
					if status.Code(err) != tc.code {
						t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
					}
					if status.Convert(err).Message() == "" {
						t.Fatal("error without a message")
					}
					if !strings.Contains(status.Convert(err).Message(), tc.msg) {
						t.Fatalf("message %q does not contain %q", status.Convert(err).Message(), tc.msg)
					}
				} else {
					if err != nil {
						t.Fatalf("call failed: %v; want item result %v", err, tc.item)
					}
					if len(res) != 1 || res[0].Ok || codes.Code(res[0].Code) != tc.item || res[0].Error == "" {
						t.Fatalf("results %v, want one item with %v", res, tc.item)
					}
					// An item's error names the item, its message and
					// its queue, as a call's own errors do.
					if !strings.Contains(res[0].Error, tc.msg) || !strings.Contains(res[0].Error, "[0]: message ") || !strings.Contains(res[0].Error, " of queue ") {
						t.Fatalf("item error %q does not name its item, message and queue (want %q in it)", res[0].Error, tc.msg)
					}
				}
				if after := c.Digests(); after != before {
					t.Fatal("bad input changed the state")
				}
			})
		}
	}
	for _, n := range c.Nodes {
		if err := n.State().Integrity().Verify(); err != nil {
			t.Fatalf("%s: counters: %v", n.ID, err)
		}
	}

	// The lease refused with stale tokens is intact: the real token works.
	if r, err := f.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "v", Acks: []*raftqv1.LeaseRef{refOf(held)}}); err != nil || !r.Results[0].Ok {
		t.Fatalf("ack with the real token = %v, %v", r, err)
	}
	for _, q := range []string{"v", "lim", "limb", "fill"} {
		if _, err := l.Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
}

// testAdminValidation: operator calls with bad ids get specific codes (not
// Internal) on the leader and through a follower, and change nothing.
func testAdminValidation(t *testing.T, c *testcluster.Cluster) {
	l := c.Leader()
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
			_, err := a.RemoveNode(ctx, &raftqv1.RemoveNodeRequest{Id: l.ID})
			return err
		}},
		{"transfer: unknown node", codes.NotFound, func(ctx context.Context, a raftqv1.ClusterClient) error {
			_, err := a.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{ToId: "nope"})
			return err
		}},
	}
	for _, tc := range cases {
		for _, n := range []*testcluster.Node{l, c.Followers()[0]} {
			t.Run(tc.name+" via "+n.ID, func(t *testing.T) {
				before := c.Digests()
				if err := tc.call(tctx(t, 10*time.Second), n.Admin); status.Code(err) != tc.code {
					t.Errorf("code %v (%v), want %v", status.Code(err), err, tc.code)
				}
				if c.Digests() != before {
					t.Fatal("state changed")
				}
			})
		}
	}
	if nl := c.WaitStable(10 * time.Second); nl != l {
		t.Fatalf("leader moved from %s to %s", l.ID, nl.ID)
	}
}
