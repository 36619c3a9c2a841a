package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func enqueueKeyed(t *testing.T, n *testcluster.Node, queue, key string, count int) {
	t.Helper()
	req := &raftqv1.EnqueueRequest{Queue: queue}
	for i := range count {
		req.Messages = append(req.Messages, &raftqv1.EnqueueMessage{Payload: []byte(fmt.Sprint(key, i)), FairnessKey: key})
	}
	if _, err := n.Broker.Enqueue(tctx(t, 10*time.Second), req); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
}

// TestPausedKeyAcrossFailover (plain gRPC, three nodes): a key paused for
// a while gets no grants while the other keys of its queue do; the leader
// is stopped with the pause still on, and the new leader, which never
// proposed the pause, ends it by itself when the replicated clock reaches
// its end: the key's messages are then delivered and GetQueue shows no
// pause. The pause goes through a follower (forwarded, as every write).
func TestPausedKeyAcrossFailover(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	c.WaitClusterVersion(fsm.PauseVersion)
	old := c.Leader()
	via := c.Followers()[0]
	mustCreate(t, old, "pk", &raftqv1.QueueConfig{VisibilityTimeoutMs: 60_000})
	const pause = 8 * time.Second
	ctx := tctx(t, time.Minute)
	started := time.Now()
	pr, err := via.Broker.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: "pk", FairnessKey: "a", DurationMs: pause.Milliseconds()})
	if err != nil {
		t.Fatalf("PauseQueue via a follower: %v", err)
	}
	if q := pr.GetQueue(); q.GetPaused() || len(q.GetPausedKeys()) != 1 || q.GetPausedKeys()[0].GetKey() != "a" || q.GetPausedKeys()[0].GetUntilMs() <= started.UnixMilli() {
		t.Fatalf("PauseQueue answered %v", q)
	}
	enqueueKeyed(t, old, "pk", "a", 5)
	enqueueKeyed(t, old, "pk", "b", 5)

	sctx, cancel := context.WithCancel(ctx)
	s, err := old.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "pk", MaxInFlight: 20})
	if err != nil {
		t.Fatal(err)
	}
	bs := recvN(t, s, 5)
	for _, d := range bs {
		if d.GetFairnessKey() != "b" {
			t.Fatalf("delivered %q of key %q while a is paused", d.GetPayload(), d.GetFairnessKey())
		}
	}
	if _, err := old.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "pk", Acks: refsOf(bs)}); err != nil {
		t.Fatal(err)
	}
	cancel()

	// Failover while the pause holds: the state clock stands still from
	// the old leader's last entry to the new one's first, so the end is
	// still ahead whatever the election takes.
	c.Restart(old)
	nl := c.WaitStable(30 * time.Second)
	if since := time.Since(started); since >= pause {
		t.Logf("the failover took %s", since)
	}
	if q := queueInfo(t, nl, "pk"); len(q.GetPausedKeys()) != 1 {
		t.Fatalf("after the failover: paused keys %v, want a still paused", q.GetPausedKeys())
	}
	s, err = nl.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "pk", MaxInFlight: 20})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, 5)
	for _, d := range ds {
		if d.GetFairnessKey() != "a" {
			t.Fatalf("after the failover delivered key %q, want a's messages", d.GetFairnessKey())
		}
	}
	// The grant rule refuses a paused key's messages, so the pause had
	// ended by the state's clock when they were granted; the state shows it.
	if q := queueInfo(t, nl, "pk"); len(q.GetPausedKeys()) != 0 || q.GetPaused() {
		t.Fatalf("after a's messages came: %v", q)
	}
	if waited := time.Since(started); waited < pause {
		t.Fatalf("a's messages came %s after the pause of %s began", waited, pause)
	}
}

// TestPauseQueueSDK (Go SDK, one node): a whole-queue pause stops every
// delivery but accepts enqueues; resuming lets them go; a bad duration or
// an unknown queue is refused with the documented code and changes
// nothing; resuming what is not paused is OK.
func TestPauseQueueSDK(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.PauseVersion)
	ctx := tctx(t, 30*time.Second)
	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mustCreate(t, l, "pq", nil)
	q, err := cl.PauseQueue(ctx, "pq", "", 0)
	if err != nil || !q.GetPaused() || q.GetPausedUntilMs() != 0 {
		t.Fatalf("PauseQueue = %v, %v", q, err)
	}
	mustEnqueue(t, l, "pq", []byte("x"), []byte("y"))
	if err := leaseErr(tctx(t, 2*time.Second), l.Broker, &raftqv1.LeaseRequest{Queue: "pq", MaxInFlight: 5}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a Lease on a paused queue: %v, want no delivery until the deadline", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"negative duration", func() error { _, err := cl.PauseQueue(ctx, "pq", "k", -time.Millisecond); return err }, codes.InvalidArgument},
		{"duration past the longest", func() error {
			_, err := cl.PauseQueue(ctx, "pq", "k", time.Duration(fsm.MaxDurationMs+1)*time.Millisecond)
			return err
		}, codes.InvalidArgument},
		{"long key", func() error { _, err := cl.PauseQueue(ctx, "pq", strings.Repeat("k", 256), 0); return err }, codes.InvalidArgument},
		{"unknown queue", func() error { _, err := cl.PauseQueue(ctx, "nope", "", 0); return err }, codes.NotFound},
	} {
		if err := tc.call(); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if q, _ := cl.GetQueue(ctx, "pq", false); len(q.GetPausedKeys()) != 0 || !q.GetPaused() {
		t.Fatalf("refused pauses changed the queue: %v", q)
	}
	if _, err := cl.ResumeQueue(ctx, "pq", "never-paused"); err != nil {
		t.Fatalf("resuming a key that is not paused: %v", err)
	}
	q, err = cl.ResumeQueue(ctx, "pq", "")
	if err != nil || q.GetPaused() {
		t.Fatalf("ResumeQueue = %v, %v", q, err)
	}
	s, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "pq", MaxInFlight: 5})
	if err != nil {
		t.Fatal(err)
	}
	recvN(t, s, 2)
}

// TestPauseNeedsItsVersion: until every voter applies PauseVersion (here
// every node advertises the version before it) PauseQueue and ResumeQueue
// are refused FAILED_PRECONDITION naming the version, with the reason the
// SDK reads, and pause nothing.
func TestPauseNeedsItsVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.PauseVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.PauseVersion - 1)
	mustCreate(t, l, "old", nil)
	ctx := tctx(t, 10*time.Second)
	for name, call := range map[string]func() error{
		"PauseQueue": func() error {
			_, err := l.Broker.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: "old"})
			return err
		},
		"ResumeQueue": func() error {
			_, err := l.Broker.ResumeQueue(ctx, &raftqv1.ResumeQueueRequest{Name: "old"})
			return err
		},
	} {
		err := call()
		st := status.Convert(err)
		want := fmt.Sprintf("log version %d", fsm.PauseVersion)
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) || !strings.Contains(st.Message(), name) {
			t.Fatalf("%s at cluster version %d: %v, want FAILED_PRECONDITION naming %s and %s", name, fsm.PauseVersion-1, err, name, want)
		}
		var reason string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				reason = info.GetReason() + " " + info.GetMetadata()["needs_version"]
			}
		}
		if reason != fmt.Sprint("CLUSTER_VERSION ", fsm.PauseVersion) {
			t.Fatalf("%s error details: %q", name, reason)
		}
	}
	mustEnqueue(t, l, "old", []byte("x"))
	s, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "old", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	recvN(t, s, 1)
}
