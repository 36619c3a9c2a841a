package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deadLetterVia fills queue's DLQ through plain gRPC: each payload is
// enqueued with its fairness key, leased and nacked to the DLQ with
// reason. It returns the ids in order.
func deadLetterVia(t *testing.T, n *testcluster.Node, queue string, key, reason string, count int) []string {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	var msgs []*raftqv1.EnqueueMessage
	for i := 0; i < count; i++ {
		msgs = append(msgs, &raftqv1.EnqueueMessage{Payload: []byte(fmt.Sprintf("%s-%d", key, i)), FairnessKey: key})
	}
	resp, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: queue, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := n.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: queue, MaxInFlight: int32(count), Limit: int64(count)})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, s, count)
	var items []*raftqv1.NackItem
	for _, d := range ds {
		items = append(items, &raftqv1.NackItem{MessageId: d.Id, LeaseToken: d.LeaseToken, DeadLetter: true, Reason: reason})
	}
	if _, err := n.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: queue, Nacks: items}); err != nil {
		t.Fatal(err)
	}
	return resp.MessageIds
}

func payloads(ds []*raftqv1.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Payload))
	}
	return out
}

// TestDLQWorkbenchOverGRPC: Peek's and Redrive's filters, paging, dry
// run, ids and a rate through a plain gRPC client; bad filters are
// INVALID_ARGUMENT and change nothing.
func TestDLQWorkbenchOverGRPC(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	ctx := tctx(t, 60*time.Second)
	mustCreate(t, l, "jobs", nil)
	a := deadLetterVia(t, l, "jobs", "tenant-a", "timeout talking to db", 3)
	b := deadLetterVia(t, l, "jobs", "tenant-b", "bad input", 2)

	peek := func(req *raftqv1.PeekRequest) []string {
		t.Helper()
		req.Queue, req.DeadLetter = "jobs", true
		resp, err := l.Broker.Peek(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return payloads(resp.Messages)
	}
	if got := strings.Join(peek(&raftqv1.PeekRequest{FairnessKey: "tenant-a", ReasonContains: "timeout"}), ","); got != "tenant-a-0,tenant-a-1,tenant-a-2" {
		t.Fatalf("peek key+reason: %s", got)
	}
	if got := strings.Join(peek(&raftqv1.PeekRequest{ReasonContains: "bad"}), ","); got != "tenant-b-0,tenant-b-1" {
		t.Fatalf("peek reason: %s", got)
	}
	// Paging in id order, two at a time.
	var all []string
	after := ""
	for page := 0; page < 10; page++ {
		resp, err := l.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "jobs", DeadLetter: true, Limit: 2, AfterId: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			break
		}
		all = append(all, payloads(resp.Messages)...)
		after = resp.Messages[len(resp.Messages)-1].Id
	}
	if got := strings.Join(all, ","); got != "tenant-a-0,tenant-a-1,tenant-a-2,tenant-b-0,tenant-b-1" {
		t.Fatalf("paged: %s", got)
	}
	if got := peek(&raftqv1.PeekRequest{OlderThanMs: 3_600_000}); got != nil {
		t.Fatalf("older than an hour: %q", got)
	}

	for _, bad := range []*raftqv1.PeekRequest{
		{Queue: "jobs", DeadLetter: true, OlderThanMs: -1},
		{Queue: "jobs", DeadLetter: true, ReasonContains: strings.Repeat("x", fsm.MaxReasonFilterLen+1)},
		{Queue: "jobs", DeadLetter: true, AfterId: "zz"},
		{Queue: "jobs", OlderThanMs: 1000},
	} {
		if _, err := l.Broker.Peek(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("peek %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	for _, bad := range []*raftqv1.RedriveRequest{
		{Queue: "jobs", OlderThanMs: -5},
		{Queue: "jobs", ReasonContains: strings.Repeat("x", fsm.MaxReasonFilterLen+1)},
		{Queue: "jobs", MessageIds: []string{a[0], "not-an-id"}},
		{Queue: "jobs", RatePerSec: -1},
		{Queue: "jobs", RatePerSec: 0.0001},
	} {
		if _, err := l.Broker.Redrive(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("redrive %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	if qi := queueInfo(t, l, "jobs"); qi.Stats.DeadLettered != 5 || qi.Stats.Ready != 0 {
		t.Fatalf("bad requests changed something: %+v", qi.Stats)
	}

	// A dry run counts and moves nothing.
	resp, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", FairnessKey: "tenant-a", DryRun: true, IdempotencyKey: "k1"})
	if err != nil || resp.Moved != 3 {
		t.Fatalf("dry run: %v, %v; want 3", resp, err)
	}
	if qi := queueInfo(t, l, "jobs"); qi.Stats.DeadLettered != 5 || qi.Stats.Ready != 0 {
		t.Fatalf("a dry run moved messages: %+v", qi.Stats)
	}
	// Exactly these ids; one not in the DLQ is skipped and not counted.
	resp, err = l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", MessageIds: []string{b[1], transport.FormatID(12345)}, IdempotencyKey: "k1"})
	if err != nil || resp.Moved != 1 {
		t.Fatalf("redrive by ids: %v, %v; want 1 (the dry run recorded no key)", resp, err)
	}

	// A rate-limited one answers at once with what it will move, shows in
	// GetQueue while it runs, and disappears when done.
	// The wall clock starts before the call: the job's pace runs on the
	// replicated clock from its own entry's reading, which the leader took
	// before it answered, so timing from the answer measured 972 ms for a
	// second's worth of moves under load.
	start := time.Now()
	resp, err = l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", RatePerSec: 2, IdempotencyKey: "k2"})
	if err != nil || resp.Moved != 4 || resp.JobId == "" {
		t.Fatalf("rate-limited redrive: %v, %v; want 4 and a job", resp, err)
	}
	qi := queueInfo(t, l, "jobs")
	if len(qi.Redrives) != 1 || qi.Redrives[0].Id != resp.JobId || qi.Redrives[0].Total != 4 || qi.Redrives[0].RatePerSec != 2 {
		t.Fatalf("GetQueue shows %v, want the job", qi.Redrives)
	}
	waitUntil(t, 20*time.Second, "the job to finish", func() error {
		if qi := queueInfo(t, l, "jobs"); len(qi.Redrives) > 0 {
			return fmt.Errorf("job at %d of %d", qi.Redrives[0].Moved, qi.Redrives[0].Total)
		}
		return nil
	})
	// A burst of 2, then 2 a second: at least a second for the other two.
	if el := time.Since(start); el < time.Second {
		t.Fatalf("4 messages at 2/s took %v", el)
	}
	if qi := queueInfo(t, l, "jobs"); qi.Stats.DeadLettered != 0 || qi.Stats.Ready != 5 {
		t.Fatalf("after the job: %+v", qi.Stats)
	}
	again, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", RatePerSec: 2, IdempotencyKey: "k2"})
	if err != nil || again.Moved != 4 {
		t.Fatalf("retry of the job's redrive: %v, %v; want 4 as the first", again, err)
	}

	// Cancelling a job: what it moved stays, nothing more moves.
	deadLetterVia(t, l, "jobs", "tenant-c", "slow", 5)
	slow, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", RatePerSec: 0.01})
	if err != nil || slow.Moved != 5 {
		t.Fatalf("slow job: %v, %v", slow, err)
	}
	waitUntil(t, 10*time.Second, "the slow job's burst", func() error {
		if qi := queueInfo(t, l, "jobs"); len(qi.Redrives) != 1 || qi.Redrives[0].Moved != 1 {
			return fmt.Errorf("jobs %v", qi.Redrives)
		}
		return nil
	})
	if _, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", CancelJob: slow.JobId, RatePerSec: 3}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("cancel with a rate: %v, want INVALID_ARGUMENT", err)
	}
	c1, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", CancelJob: slow.JobId})
	if err != nil || c1.Moved != 1 {
		t.Fatalf("cancel: %v, %v; want 1 moved", c1, err)
	}
	if qi := queueInfo(t, l, "jobs"); len(qi.Redrives) != 0 || qi.Stats.DeadLettered != 4 {
		t.Fatalf("after the cancel: %v %v", qi.Redrives, qi.Stats)
	}
	if _, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", CancelJob: slow.JobId}); status.Code(err) != codes.NotFound {
		t.Fatalf("cancel of a job that is gone: %v, want NOT_FOUND", err)
	}
}

// TestDLQFiltersNeedTheirVersion: until every voter applies
// fsm.RedriveVersion the new fields are refused FAILED_PRECONDITION
// naming it (an older entry would ignore them and move everything).
func TestDLQFiltersNeedTheirVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.RedriveVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.RedriveVersion - 1)
	ctx := tctx(t, 30*time.Second)
	mustCreate(t, l, "jobs", nil)
	deadLetterVia(t, l, "jobs", "k", "timeout", 2)
	want := fmt.Sprint("log version ", fsm.RedriveVersion)
	for _, req := range []*raftqv1.RedriveRequest{
		{Queue: "jobs", DryRun: true},
		{Queue: "jobs", FairnessKey: "k"},
		{Queue: "jobs", RatePerSec: 10},
		{Queue: "jobs", OlderThanMs: 1000},
	} {
		_, err := l.Broker.Redrive(ctx, req)
		if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) {
			t.Errorf("redrive %v at version %d: %v, want FAILED_PRECONDITION naming %s", req, fsm.RedriveVersion-1, err, want)
		}
	}
	_, err := l.Broker.Peek(ctx, &raftqv1.PeekRequest{Queue: "jobs", DeadLetter: true, ReasonContains: "timeout"})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) {
		t.Errorf("filtered peek: %v, want FAILED_PRECONDITION naming %s", err, want)
	}
	if qi := queueInfo(t, l, "jobs"); qi.Stats.DeadLettered != 2 {
		t.Fatalf("refused redrives moved messages: %+v", qi.Stats)
	}
	// A plain redrive works as ever.
	if resp, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs"}); err != nil || resp.Moved != 2 {
		t.Fatalf("plain redrive: %v, %v", resp, err)
	}
}

// TestDLQWorkbenchThroughTheSDK: PeekWith pages a filtered DLQ, a dry
// run through RedriveWith moves nothing, and a rate-limited one returns
// at once and finishes by itself.
func TestDLQWorkbenchThroughTheSDK(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	l := c.Leader()
	ctx := tctx(t, 60*time.Second)
	mustCreate(t, l, "jobs", nil)
	deadLetterVia(t, l, "jobs", "tenant-a", "timeout", 6)
	deadLetterVia(t, l, "jobs", "tenant-b", "timeout", 2)
	cl, err := client.Dial(ctx, []string{l.Addrs.GRPC})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for after := ""; ; {
		ds, err := cl.PeekWith(ctx, &raftqv1.PeekRequest{Queue: "jobs", DeadLetter: true, FairnessKey: "tenant-a", Limit: 4, AfterId: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		got = append(got, payloads(ds)...)
		after = ds[len(ds)-1].Id
	}
	if strings.Join(got, ",") != "tenant-a-0,tenant-a-1,tenant-a-2,tenant-a-3,tenant-a-4,tenant-a-5" {
		t.Fatalf("paged: %q", got)
	}
	dry, err := cl.RedriveWith(ctx, &raftqv1.RedriveRequest{Queue: "jobs", ReasonContains: "timeout", DryRun: true})
	if err != nil || dry.Moved != 8 {
		t.Fatalf("dry run: %v, %v", dry, err)
	}
	if qi, err := cl.GetQueue(ctx, "jobs", false); err != nil || qi.Stats.DeadLettered != 8 {
		t.Fatalf("after a dry run: %v, %v", qi, err)
	}
	job, err := cl.RedriveWith(ctx, &raftqv1.RedriveRequest{Queue: "jobs", FairnessKey: "tenant-a", RatePerSec: 4})
	if err != nil || job.Moved != 6 || job.JobId == "" {
		t.Fatalf("rate-limited: %v, %v", job, err)
	}
	waitUntil(t, 20*time.Second, "the job to finish", func() error {
		qi, err := cl.GetQueue(ctx, "jobs", false)
		if err != nil {
			return err
		}
		if len(qi.Redrives) > 0 || qi.Stats.Ready != 6 {
			return fmt.Errorf("jobs %v, ready %d", qi.Redrives, qi.Stats.Ready)
		}
		return nil
	})
}

// TestCancelJobNeedsItsVersion: below fsm.RedriveCancelVersion an entry
// would take cancel_job for a redrive of everything, so the edge refuses
// it FAILED_PRECONDITION naming the version, and nothing moves.
func TestCancelJobNeedsItsVersion(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.RedriveCancelVersion - 1})
	l := c.Leader()
	c.WaitClusterVersion(fsm.RedriveCancelVersion - 1)
	ctx := tctx(t, 30*time.Second)
	mustCreate(t, l, "jobs", nil)
	deadLetterVia(t, l, "jobs", "k", "timeout", 3)
	job, err := l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", RatePerSec: 0.001})
	if err != nil || job.JobId == "" {
		t.Fatalf("job: %v, %v", job, err)
	}
	waitUntil(t, 10*time.Second, "the job's burst of one", func() error {
		if qi := queueInfo(t, l, "jobs"); qi.Stats.DeadLettered != 2 {
			return fmt.Errorf("%d dead-lettered", qi.Stats.DeadLettered)
		}
		return nil
	})
	_, err = l.Broker.Redrive(ctx, &raftqv1.RedriveRequest{Queue: "jobs", CancelJob: job.JobId})
	want := fmt.Sprint("log version ", fsm.RedriveCancelVersion)
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) {
		t.Fatalf("cancel at version %d: %v, want FAILED_PRECONDITION naming %s", fsm.RedriveCancelVersion-1, err, want)
	}
	if qi := queueInfo(t, l, "jobs"); qi.Stats.DeadLettered != 2 || len(qi.Redrives) != 1 {
		t.Fatalf("a refused cancel changed something: %v %v", qi.Stats, qi.Redrives)
	}
}
