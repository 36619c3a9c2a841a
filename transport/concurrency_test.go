package transport_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestConcurrencyCapsOverPlainGRPC: a plain gRPC client sets caps on
// create, enqueues keyed messages and leases: a key at its cap holds only
// its own messages, a cap of 1 gives the key's next message only after
// the previous is acked, and UpdateQueue raising a cap lets more through.
func TestConcurrencyCapsOverPlainGRPC(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.MaxLogVersion)
	conn, err := grpc.NewClient(l.Addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bc := raftqv1.NewBrokerClient(conn)
	ctx := tctx(t, time.Minute)
	cfg := &raftqv1.QueueConfig{ConcurrencyLimit: 1, ConcurrencyLimits: map[string]int32{"b": 2}}
	if _, err := bc.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	qi, err := bc.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "jobs"})
	if err != nil || qi.GetQueue().GetConfig().GetConcurrencyLimit() != 1 || qi.GetQueue().GetConfig().GetConcurrencyLimits()["b"] != 2 {
		t.Fatalf("GetQueue: %v %v", qi, err)
	}
	var msgs []*raftqv1.EnqueueMessage
	for _, k := range []string{"a", "a", "a", "b", "b", "b", ""} {
		msgs = append(msgs, &raftqv1.EnqueueMessage{Payload: fmt.Appendf(nil, "%s%d", k, len(msgs)), ConcurrencyKey: k})
	}
	if _, err := bc.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	s, err := bc.Lease(ctx, &raftqv1.LeaseRequest{Queue: "jobs", MaxInFlight: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*raftqv1.Delivery{}
	for _, d := range recvN(t, s, 4) {
		got[string(d.Payload)] = d
	}
	for _, p := range []string{"a0", "b3", "b4", "6"} {
		if got[p] == nil {
			t.Fatalf("first deliveries %v, want a0, b3, b4 and the unkeyed 6", got)
		}
	}
	// Nothing else may come until a0 is acked; then a1 is next.
	if _, err := bc.Ack(ctx, &raftqv1.AckRequest{Queue: "jobs", Acks: []*raftqv1.LeaseRef{refOf(got["a0"])}}); err != nil {
		t.Fatal(err)
	}
	if d := recvN(t, s, 1)[0]; string(d.Payload) != "a1" {
		t.Fatalf("after acking a0: %s, want a1", d.Payload)
	}
	if _, err := bc.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: "jobs", Config: &raftqv1.QueueConfig{ConcurrencyLimits: map[string]int32{"b": 3}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limits"}}}); err != nil {
		t.Fatal(err)
	}
	if d := recvN(t, s, 1)[0]; string(d.Payload) != "b5" {
		t.Fatalf("after raising b to 3: %s, want b5", d.Payload)
	}
	_, err = bc.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "bad", Config: &raftqv1.QueueConfig{ConcurrencyLimit: -1}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative cap: %v, want INVALID_ARGUMENT", err)
	}
	_, err = bc.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{ConcurrencyKey: strings.Repeat("k", 256)}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("long key: %v, want INVALID_ARGUMENT", err)
	}
}

// TestConcurrencyNeedsVersion: until every voter applies
// fsm.ConcurrencyVersion, caps and keys are refused FAILED_PRECONDITION
// naming the version, and nothing is created or enqueued.
func TestConcurrencyNeedsVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.ConcurrencyVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.ConcurrencyVersion - 1)
	mustCreate(t, l, "jobs", nil)
	ctx := tctx(t, 10*time.Second)
	check := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), fmt.Sprint("log version ", fsm.ConcurrencyVersion)) || !strings.Contains(st.Message(), "concurrency") {
			t.Fatalf("%s below the version: %v, want FAILED_PRECONDITION naming log version %d", what, err, fsm.ConcurrencyVersion)
		}
	}
	_, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "capped", Config: &raftqv1.QueueConfig{ConcurrencyLimit: 2}})
	check("create with concurrency_limit", err)
	_, err = l.Broker.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: "jobs", Config: &raftqv1.QueueConfig{ConcurrencyLimits: map[string]int32{"a": 1}}})
	check("update with concurrency_limits", err)
	_, err = l.Broker.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: "jobs", Config: &raftqv1.QueueConfig{}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}}})
	check("update mask concurrency_limit", err)
	_, err = l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x"), ConcurrencyKey: "a"}}})
	check("enqueue with concurrency_key", err)
	if qi := queueInfo(t, l, "jobs"); qi.GetStats().GetReady() != 0 {
		t.Fatalf("refused enqueue stored %d", qi.GetStats().GetReady())
	}
	if _, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "capped"}); status.Code(err) != codes.NotFound {
		t.Fatalf("refused create: %v", err)
	}
}

// TestConcurrencyCapsThroughSDK: the Go SDK's consumer, eight handlers at
// once, on a queue capped at 1 per key: the three keys' first messages are
// handled at the same time (no key waits for another), nothing more is in
// flight meanwhile, and each key's messages are handled one at a time in
// enqueue order.
func TestConcurrencyCapsThroughSDK(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.MaxLogVersion)
	ctx := tctx(t, time.Minute)
	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{ConcurrencyLimit: 1}); err != nil {
		t.Fatal(err)
	}
	const perKey = 10
	keys := []string{"a", "b", "c"}
	var msgs []*raftqv1.EnqueueMessage
	for i := range perKey {
		for _, k := range keys {
			msgs = append(msgs, &raftqv1.EnqueueMessage{Payload: fmt.Appendf(nil, "%s/%d", k, i), ConcurrencyKey: k})
		}
	}
	if _, err := cl.Enqueue(ctx, "jobs", msgs...); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		running = map[string]int{}
		order   = map[string][]string{}
		bad     []string
	)
	firsts := make(chan struct{}, len(keys))
	release := make(chan struct{})
	done := make(chan struct{}, len(msgs))
	con := client.NewConsumer(cl, "jobs", func(ctx context.Context, d *raftqv1.Delivery) error {
		k, _, _ := strings.Cut(string(d.Payload), "/")
		mu.Lock()
		running[k]++
		if running[k] > 1 {
			bad = append(bad, fmt.Sprintf("%s with %d of its key running", d.Payload, running[k]))
		}
		order[k] = append(order[k], string(d.Payload))
		first := len(order[k]) == 1
		mu.Unlock()
		if first {
			firsts <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		mu.Lock()
		running[k]--
		mu.Unlock()
		done <- struct{}{}
		return nil
	}, client.ConsumerOptions{MaxInFlight: 8, Concurrency: 8})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go con.Run(rctx)
	for range keys {
		select {
		case <-firsts:
		case <-ctx.Done():
			t.Fatal("the keys' first messages were not handled at the same time")
		}
	}
	if st := queueInfo(t, l, "jobs").GetStats(); st.GetInFlight() != int64(len(keys)) {
		t.Fatalf("%d in flight while each key's first is held, want %d", st.GetInFlight(), len(keys))
	}
	close(release)
	for range msgs {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("not every message was handled")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("over the cap: %v", bad)
	}
	for _, k := range keys {
		for i, p := range order[k] {
			if want := fmt.Sprintf("%s/%d", k, i); p != want {
				t.Fatalf("key %s handled %v, want enqueue order", k, order[k])
			}
		}
	}
}
