package metrics

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestDrainEstimate walks one queue through growing, draining (with its
// time to empty and delivery rate), empty, and deleted.
func TestDrainEstimate(t *testing.T) {
	f := buildState(t, 1, 100, 1, 0) // q0000 at indexes 1-2
	apply := func(index uint64, cmd *fsmv1.Command) {
		t.Helper()
		if err := f.ApplyCommand(index, cmd).Failure(); err != nil {
			t.Fatal(err)
		}
	}
	// tau far below the interval: each estimate is the last interval's rate.
	d := NewDrain(f.Reader(), time.Millisecond)
	t0 := time.UnixMilli(1_700_000_000_000)
	check := func(want DrainState, depth int64, rate, deliveries float64, emptiesIn time.Duration) {
		t.Helper()
		e, ok := d.Estimate("q0000")
		if !ok {
			t.Fatal("no estimate for q0000")
		}
		if e.State != want || e.Depth != depth || math.Abs(e.DepthChangePerSec-rate) > 1e-6 ||
			math.Abs(e.DeliveriesPerSec-deliveries) > 1e-6 || (e.EmptiesIn-emptiesIn).Abs() > time.Millisecond {
			t.Fatalf("estimate = %+v, want %s depth %d at %v/s, %v deliveries/s, empties in %v", e, want, depth, rate, deliveries, emptiesIn)
		}
	}

	d.Sample(t0)
	check(DrainUnknown, 100, 0, 0, 0)
	d.Sample(t0) // same instant: no interval, nothing learnt
	check(DrainUnknown, 100, 0, 0, 0)

	msgs := make([]*fsmv1.EnqueueMessage, 100)
	for i := range msgs {
		msgs[i] = &fsmv1.EnqueueMessage{Payload: []byte("x")}
	}
	apply(3, &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q0000", Messages: msgs}}}}})
	d.Sample(t0.Add(10 * time.Second))
	check(DrainGrowing, 200, 10, 0, 0)

	// 50 of the first batch granted and acked: 150 left, 5/s.
	var grants []*fsmv1.Grant
	var refs []*fsmv1.Ref
	for i := range 50 {
		id := uint64(2)<<20 | uint64(i)
		grants = append(grants, &fsmv1.Grant{Queue: "q0000", MessageId: id, ConsumerId: "c", DeadlineMs: math.MaxInt64 / 2})
		refs = append(refs, &fsmv1.Ref{Queue: "q0000", MessageId: id, LeaseToken: uint64(4)<<20 | uint64(i)})
	}
	apply(4, &fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: grants}}})
	apply(5, &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}})
	d.Sample(t0.Add(20 * time.Second))
	check(DrainDraining, 150, -5, 5, 30*time.Second)
	if err := testutil.CollectAndCompare(NewQueueCollector(f.Reader(), nil, time.Now, d), strings.NewReader(`
# HELP raftq_queue_drain_seconds Estimated seconds until a queue is empty at its current rates: 0 when empty, +Inf while it grows or holds steady; no series until two samples exist.
# TYPE raftq_queue_drain_seconds gauge
raftq_queue_drain_seconds{queue="q0000"} 30
raftq_queue_drain_seconds{queue="q0000.dlq"} 0
`), "raftq_queue_drain_seconds"); err != nil {
		t.Error(err)
	}

	d.Sample(t0.Add(30 * time.Second))
	check(DrainSteady, 150, 0, 0, 0)

	apply(6, &fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "q0000"}}})
	d.Sample(t0.Add(40 * time.Second))
	check(DrainEmpty, 0, -15, 0, 0)

	apply(7, &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "q0000"}}})
	d.Sample(t0.Add(50 * time.Second))
	if e, ok := d.Estimate("q0000"); ok {
		t.Errorf("a deleted queue still has an estimate: %+v", e)
	}
}

// TestDrainAverages: with a time constant longer than the interval a
// burst moves the average only part of the way.
func TestDrainAverages(t *testing.T) {
	f := buildState(t, 1, 10, 1, 0)
	d := NewDrain(f.Reader(), time.Minute)
	t0 := time.UnixMilli(1_700_000_000_000)
	d.Sample(t0)
	d.Sample(t0.Add(5 * time.Second)) // rate 0: the first rate is taken as is
	msgs := make([]*fsmv1.EnqueueMessage, 60)
	for i := range msgs {
		msgs[i] = &fsmv1.EnqueueMessage{Payload: []byte("x")}
	}
	if err := f.ApplyCommand(3, &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q0000", Messages: msgs}}}}}).Failure(); err != nil {
		t.Fatal(err)
	}
	d.Sample(t0.Add(10 * time.Second)) // this interval: +12/s
	e, _ := d.Estimate("q0000")
	want := 12 * (1 - math.Exp(-5.0/60))
	if math.Abs(e.DepthChangePerSec-want) > 1e-9 || e.State != DrainGrowing {
		t.Errorf("estimate = %+v, want growing at %v/s", e, want)
	}
}

var _ State = fsm.Reader{}
