package fsm

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func TestCreateQueueDefaultsAndDLQ(t *testing.T) {
	h := newHarness(t)
	h.create("jobs", nil)
	qi := h.info("jobs")
	c := qi.Config
	if c.VisibilityTimeoutMs != 30000 || c.MaxDeliveries != 10 || c.DedupWindowMs != 120000 || c.MaxMessageBytes != 1<<20 || c.DeadLetterQueue != "jobs.dlq" {
		t.Fatalf("effective config = %v", c)
	}
	dlq := h.info("jobs.dlq")
	if !dlq.IsDeadLetterQueue || dlq.Config.DeadLetterQueue != "" {
		t.Fatalf("dlq = %v", dlq)
	}
	res := as[*QueueResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "jobs"}}}))
	if !errors.Is(res.Failure(), ErrQueueExists) {
		t.Fatalf("second create: %v", res.Failure())
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	_, before, _ := h.f.Integrity().Digest()
	long := strings.Repeat("a", 256)
	cases := []struct {
		name string
		cmd  *fsmv1.Command
		want error
	}{
		{"empty name", &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: ""}}}, ErrInvalid},
		{"long name", &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: long}}}, ErrInvalid},
		{"bad char", &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "a/b"}}}, ErrInvalid},
		{"negative visibility", &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "x", Config: &fsmv1.QueueConfig{VisibilityTimeoutMs: -1}}}}, ErrInvalid},
		{"bad throttle", &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "x", Config: &fsmv1.QueueConfig{Throttles: map[string]*fsmv1.ThrottleRule{"k": {RatePerSec: 0}}}}}}, ErrInvalid},
		{"update unknown", &fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "nope"}}}, ErrQueueNotFound},
		{"update bad mask", &fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Mask: []string{"colour"}}}}, ErrInvalid},
		{"delete unknown", &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "nope"}}}, ErrQueueNotFound},
		{"delete dlq in use", &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "q.dlq"}}}, ErrInUse},
		{"purge unknown", &fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "nope"}}}, ErrQueueNotFound},
		{"redrive negative", &fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: "q", Limit: -1}}}, ErrInvalid},
		{"empty command", &fsmv1.Command{}, ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := h.apply(tc.cmd)
			if !errors.Is(res.Failure(), tc.want) {
				t.Fatalf("err = %v, want %v", res.Failure(), tc.want)
			}
		})
	}
	batchCases := []struct {
		name string
		b    *fsmv1.EnqueueBatch
		want error
	}{
		{"unknown queue", &fsmv1.EnqueueBatch{Queue: "nope", Messages: []*fsmv1.EnqueueMessage{{}}}, ErrQueueNotFound},
		{"zero messages", &fsmv1.EnqueueBatch{Queue: "q"}, ErrInvalid},
		{"oversized payload", &fsmv1.EnqueueBatch{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{}, {Payload: make([]byte, 1<<20+1)}}}, ErrInvalid},
		{"negative delay", &fsmv1.EnqueueBatch{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{DelayMs: -5}}}, ErrInvalid},
		{"negative ttl", &fsmv1.EnqueueBatch{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{TtlMs: -5}}}, ErrInvalid},
		{"empty throttle key", &fsmv1.EnqueueBatch{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{ThrottleKeys: []string{""}}}}, ErrInvalid},
	}
	for _, tc := range batchCases {
		t.Run(tc.name, func(t *testing.T) {
			res := as[*EnqueueResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{tc.b}}}}))
			if !errors.Is(as[*EnqueueResult](t, res).Batches[0].Err, tc.want) {
				t.Fatalf("err = %v, want %v", as[*EnqueueResult](t, res).Batches[0].Err, tc.want)
			}
		})
	}
	_, after, _ := h.f.Integrity().Digest()
	// The applied index is part of the digest; compare the state by
	// re-freezing with the old index.
	h.f.mu.Lock()
	fr := h.f.store.Freeze(1)
	h.f.mu.Unlock()
	same, _ := fr.Digest()
	if same != before {
		t.Fatalf("bad input changed state: digest %s -> %s (after=%s)", before, same, after)
	}
}

func TestFIFOAndLeaseVisible(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	var want []string
	for i := 0; i < 10; i++ {
		want = append(want, string(rune('a'+i)))
	}
	ids := h.enqueuePayloads("q", want...)
	if !slices.IsSorted(ids) {
		t.Fatalf("ids not ordered: %v", ids)
	}
	if got := h.readyIDs("q"); !slices.Equal(got, want) {
		t.Fatalf("peek order = %v, want %v", got, want)
	}
	ds := h.grant("q", "c1", 1000, ids[0])
	if ds[0].Attempt != 1 || ds[0].LeaseToken == 0 || ds[0].LeaseDeadlineMs != h.now+1000 {
		t.Fatalf("delivery = %v", ds[0])
	}
	st := h.info("q").Stats
	if st.Ready != 9 || st.InFlight != 1 {
		t.Fatalf("stats = %v", st)
	}
	h.f.Reader().Read(func(v View) {
		if v.LeasesHeld("c1") != 1 {
			t.Fatalf("LeasesHeld = %d", v.LeasesHeld("c1"))
		}
	})
}

func TestStaleAckChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.create("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 100})
	ids := h.enqueuePayloads("q", "x")
	d1 := h.grant("q", "c1", 100, ids[0])[0]
	h.now += 200
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(d1)}}}})
	d2 := h.grant("q", "c2", 100, ids[0])[0]
	if d2.Attempt != 2 {
		t.Fatalf("attempt after expiry = %d, want 2", d2.Attempt)
	}
	res := h.ack(d1)
	if !errors.Is(res.Items[0], ErrStaleLease) {
		t.Fatalf("stale ack: %v", res.Items[0])
	}
	if st := h.info("q").Stats; st.InFlight != 1 || st.AckedTotal != 0 {
		t.Fatalf("stale ack changed stats: %v", st)
	}
	if res := h.ack(d2); res.Items[0] != nil {
		t.Fatalf("ack: %v", res.Items[0])
	}
	if res := h.ack(d2); !errors.Is(res.Items[0], ErrMessageNotFound) {
		t.Fatalf("second ack: %v", res.Items[0])
	}
	if st := h.info("q").Stats; st.InFlight != 0 || st.AckedTotal != 1 || st.ExpiredTotal != 1 {
		t.Fatalf("stats = %v", st)
	}
}

func TestExpireBeforeDeadlineRefused(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "x")
	d := h.grant("q", "c1", 1000, ids[0])[0]
	res := as[*ItemsResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(d)}}}}))
	if !errors.Is(res.Items[0], ErrStaleLease) {
		t.Fatalf("early expire: %v", res.Items[0])
	}
}

func TestNackPastMaxDeliveriesAndRedrive(t *testing.T) {
	h := newHarness(t)
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 3})
	ids := h.enqueuePayloads("q", "x")
	for i := 1; i <= 3; i++ {
		d := h.grant("q", "c", 1000, ids[0])[0]
		if d.Attempt != int32(i) {
			t.Fatalf("attempt = %d, want %d", d.Attempt, i)
		}
		if res := h.nack(d, 0, false); res.Items[0] != nil {
			t.Fatal(res.Items[0])
		}
	}
	if st := h.info("q").Stats; st.Ready != 0 || st.DeadLettered != 1 || st.NackedTotal != 3 {
		t.Fatalf("stats = %v", st)
	}
	dl, _ := h.f.Reader().Peek("q", 10, true)
	if len(dl) != 1 || dl[0].DeadLetterReason != "max_deliveries" || dl[0].OriginQueue != "q" {
		t.Fatalf("dlq = %v", dl)
	}
	res := as[*CountResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: "q"}}}))
	if res.Count != 1 {
		t.Fatalf("moved = %d", res.Count)
	}
	d := h.grant("q", "c", 1000, ids[0])[0]
	if d.Attempt != 1 {
		t.Fatalf("attempt after redrive = %d", d.Attempt)
	}
	if st := h.info("q").Stats; st.DeadLettered != 0 {
		t.Fatalf("stats = %v", st)
	}
}

func TestNackStraightToDLQAndWithDelay(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a", "b")
	ds := h.grant("q", "c", 1000, ids...)
	h.nack(ds[0], 0, true)
	h.nack(ds[1], 500, false)
	st := h.info("q").Stats
	if st.DeadLettered != 1 || st.Delayed != 1 || st.Ready != 0 {
		t.Fatalf("stats = %v", st)
	}
	h.now += 499
	h.tick()
	if st := h.info("q").Stats; st.Delayed != 1 {
		t.Fatalf("visible early: %v", st)
	}
	h.now++
	h.tick()
	if st := h.info("q").Stats; st.Delayed != 0 || st.Ready != 1 {
		t.Fatalf("not visible on time: %v", st)
	}
}

func TestPriorities(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	h.enqueue("q",
		&fsmv1.EnqueueMessage{Payload: []byte("low"), Priority: -1},
		&fsmv1.EnqueueMessage{Payload: []byte("mid")},
		&fsmv1.EnqueueMessage{Payload: []byte("high"), Priority: 5},
		&fsmv1.EnqueueMessage{Payload: []byte("mid2")},
	)
	if got, want := h.readyIDs("q"), []string{"high", "mid", "mid2", "low"}; !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	var prios []int32
	h.f.Reader().Read(func(v View) {
		qv, _ := v.Queue("q")
		prios = qv.Priorities(nil)
	})
	if !slices.Equal(prios, []int32{5, 0, -1}) {
		t.Fatalf("priorities = %v", prios)
	}
}

func TestPeekWeightedFairness(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	var msgs []*fsmv1.EnqueueMessage
	for i := 0; i < 4; i++ {
		msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: []byte("a"), FairnessKey: "a"})
	}
	for i := 0; i < 4; i++ {
		msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: []byte("b"), FairnessKey: "b", Weight: 2})
	}
	h.enqueue("q", msgs...)
	if got, want := h.readyIDs("q"), []string{"a", "b", "b", "a", "b", "b", "a", "a"}; !slices.Equal(got, want) {
		t.Fatalf("peek = %v, want %v", got, want)
	}
}

func TestDelayedNotReadyEarly(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("later"), DelayMs: 1000})
	id := ids[0]
	res := as[*GrantResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{{Queue: "q", MessageId: id, ConsumerId: "c", DeadlineMs: h.now + 10}}}}}))
	if !errors.Is(res.Items[0], ErrStaleLease) {
		t.Fatalf("granted a delayed message: %v", res.Items[0])
	}
	var due int64
	h.f.Reader().Read(func(v View) { due, _ = v.NextDue() })
	if due != h.now+1000 {
		t.Fatalf("NextDue = %d, want %d", due, h.now+1000)
	}
	h.now += 1000
	h.grant("q", "c", 10, ids[0])
}

func TestDedupWithinWindow(t *testing.T) {
	h := newHarness(t)
	h.create("q", &fsmv1.QueueConfig{DedupWindowMs: 1000})
	a := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("1"), DedupId: "x"}, &fsmv1.EnqueueMessage{Payload: []byte("1b"), DedupId: "x"})
	if a[0] != a[1] {
		t.Fatalf("same batch dedup: %v", a)
	}
	b := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("2"), DedupId: "x"})
	if b[0] != a[0] {
		t.Fatalf("dedup returned %d, want %d", b[0], a[0])
	}
	if st := h.info("q").Stats; st.Ready != 1 || st.EnqueuedTotal != 1 {
		t.Fatalf("stats = %v", st)
	}
	h.now += 1001
	c := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("3"), DedupId: "x"})
	if c[0] == a[0] {
		t.Fatalf("dedup outlived its window")
	}
}

func TestTTLGoesToDLQ(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("a"), TtlMs: 100}, &fsmv1.EnqueueMessage{Payload: []byte("b"), TtlMs: 100})
	d := h.grant("q", "c", 1000, ids[1])[0]
	h.now += 100
	h.tick()
	if st := h.info("q").Stats; st.Ready != 0 || st.DeadLettered != 1 || st.InFlight != 1 {
		t.Fatalf("stats = %v", st)
	}
	h.nack(d, 0, false)
	dl, _ := h.f.Reader().Peek("q", 10, true)
	if len(dl) != 2 || dl[0].DeadLetterReason != "ttl" || dl[1].DeadLetterReason != "ttl" {
		t.Fatalf("dlq = %v", dl)
	}
}

func TestReleaseConsumerAndRollback(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a", "b", "c")
	ds := h.grant("q", "c1", 1000, ids...)
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: []*fsmv1.Ref{ref(ds[0])}}}})
	res := as[*CountResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_ReleaseConsumer{ReleaseConsumer: &fsmv1.ReleaseConsumer{ConsumerId: "c1"}}}))
	if res.Count != 2 {
		t.Fatalf("released %d", res.Count)
	}
	again := h.grant("q", "c2", 1000, ids...)
	if again[0].Attempt != 1 || again[1].Attempt != 2 || again[2].Attempt != 2 {
		t.Fatalf("attempts = %d %d %d, want 1 2 2", again[0].Attempt, again[1].Attempt, again[2].Attempt)
	}
}

func TestExtend(t *testing.T) {
	h := newHarness(t)
	h.create("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 5000})
	ids := h.enqueuePayloads("q", "a")
	d := h.grant("q", "c", 100, ids[0])[0]
	h.now += 50
	res := as[*ExtendResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: []*fsmv1.Ref{ref(d)}}}}))
	if res.Deadlines[0] != h.now+5000 {
		t.Fatalf("deadline = %d, want %d", res.Deadlines[0], h.now+5000)
	}
	res = as[*ExtendResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: []*fsmv1.Ref{ref(d)}, ExtendByMs: 10}}}))
	if res.Deadlines[0] != h.now+10 {
		t.Fatalf("deadline = %d", res.Deadlines[0])
	}
}

func TestPurgeKeepsLeased(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a", "b")
	h.enqueue("q", &fsmv1.EnqueueMessage{DelayMs: 100})
	h.grant("q", "c", 1000, ids[0])
	res := as[*CountResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "q"}}}))
	if res.Count != 2 {
		t.Fatalf("purged %d", res.Count)
	}
	if st := h.info("q").Stats; st.InFlight != 1 || st.Ready != 0 || st.Delayed != 0 {
		t.Fatalf("stats = %v", st)
	}
}

func TestSharedDLQAndDelete(t *testing.T) {
	h := newHarness(t)
	h.create("errors", nil)
	h.create("a", &fsmv1.QueueConfig{DeadLetterQueue: "errors", MaxDeliveries: 1})
	h.create("b", &fsmv1.QueueConfig{DeadLetterQueue: "errors", MaxDeliveries: 1})
	if _, err := h.f.Reader().GetQueue("errors.dlq"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("errors.dlq should be gone once errors became a DLQ: %v", err)
	}
	for _, q := range []string{"a", "b"} {
		ids := h.enqueuePayloads(q, q)
		d := h.grant(q, "c", 1000, ids[0])[0]
		h.nack(d, 0, false)
	}
	if st := h.info("errors").Stats; st.Ready != 2 {
		t.Fatalf("shared dlq stats = %v", st)
	}
	if res := as[*CountResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: "a"}}})); res.Count != 1 {
		t.Fatalf("redrive a moved %d", res.Count)
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "b"}}})
	if _, err := h.f.Reader().GetQueue("errors"); err != nil {
		t.Fatalf("shared DLQ deleted with one of its users: %v", err)
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "a"}}})
	h.create("solo", nil)
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "solo"}}})
	if _, err := h.f.Reader().GetQueue("solo.dlq"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("auto DLQ survived its queue: %v", err)
	}
}

func TestUpdateQueueMask(t *testing.T) {
	h := newHarness(t)
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 3, VisibilityTimeoutMs: 1000})
	res := as[*QueueResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{VisibilityTimeoutMs: 2000, MaxDeliveries: 99}, Mask: []string{"visibility_timeout_ms"}}}}))
	if res.Queue.Config.VisibilityTimeoutMs != 2000 || res.Queue.Config.MaxDeliveries != 3 {
		t.Fatalf("config = %v", res.Queue.Config)
	}
	res = as[*QueueResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{Throttles: map[string]*fsmv1.ThrottleRule{"t": {RatePerSec: 5}}}}}}))
	if res.Queue.Config.VisibilityTimeoutMs != 30000 || res.Queue.Config.Throttles["t"].Burst != 1 || res.Queue.Config.DeadLetterQueue != "q.dlq" {
		t.Fatalf("full replace = %v", res.Queue.Config)
	}
}

func TestClockNeverRunsBackwards(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a")
	d := h.grant("q", "c", 100, ids[0])[0]
	h.now -= 10_000 // a new leader with a slower clock
	res := as[*ItemsResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(d)}}}}))
	if !errors.Is(res.Items[0], ErrStaleLease) {
		t.Fatalf("expired with an earlier clock: %v", res.Items[0])
	}
	if h.f.Reader().Now() != 1_000_000 {
		t.Fatalf("clock went backwards: %d", h.f.Reader().Now())
	}
}

func TestNackUnprocessedDoesNotCountAttempt(t *testing.T) {
	h := newHarness(t)
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 1})
	ids := h.enqueuePayloads("q", "a")
	d := h.grant("q", "c", 1000, ids[0])[0]
	res := as[*ItemsResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), Uncounted: true}}}}}))
	_ = res
	if st := h.info("q").Stats; st.Ready != 1 || st.DeadLettered != 0 || st.NackedTotal != 0 {
		t.Fatalf("stats after unprocessed hand-back = %v", st)
	}
	if again := h.grant("q", "c", 1000, ids[0])[0]; again.Attempt != 1 {
		t.Fatalf("attempt = %d, want 1", again.Attempt)
	}
}

// TestProposedCommandSkipsDecode: an entry this node proposed is applied
// from the recorded command, not decoded again under the lock, and only
// once; after the proposer forgets it (or on another node) the data is
// decoded. The recorded command is the one decoded from the proposed
// bytes, so neither the proposer's object nor a nil element in it can make
// the leader apply something the followers do not.
func TestProposedCommandSkipsDecode(t *testing.T) {
	props := &Proposals{}
	h := newHarness(t)
	h.f = New(Options{Proposals: props})
	h.create("q", nil)
	cmd := &fsmv1.Command{NowMs: 5, Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{
		{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{Payload: []byte("proposed")}, nil}}}}}}
	data, forget, err := props.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	// What the proposer does to its command afterwards does not reach the
	// state; changing the entry's bytes shows which applications decoded.
	cmd.GetEnqueue().Batches[0].Messages[0].Payload[0] = 'X'
	copy(data[bytes.Index(data, []byte("proposed")):], "decoded!")
	h.f.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data})
	h.f.Apply(&raft.Log{Index: 101, Type: raft.LogCommand, Data: data})
	forget()
	h.f.Apply(&raft.Log{Index: 102, Type: raft.LogCommand, Data: data})
	ds, err := h.f.Reader().Peek("q", 10, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, string(d.Payload))
	}
	// The nil element is an empty message on every path.
	if want := []string{"proposed", "", "decoded!", "", "decoded!", ""}; !slices.Equal(got, want) {
		t.Fatalf("payloads %q, want %q", got, want)
	}
}
