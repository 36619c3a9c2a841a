package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// buildState creates queues named q0000.. each holding perQueue ready
// messages spread over keys fairness keys, enqueued at nowMs.
func buildState(tb testing.TB, queues, perQueue, keys int, nowMs int64) *fsm.FSM {
	tb.Helper()
	f := fsm.New(fsm.Options{})
	index := uint64(1)
	for i := range queues {
		name := fmt.Sprintf("q%04d", i)
		res := f.ApplyCommand(index, &fsmv1.Command{NowMs: nowMs, Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name}}})
		if err := res.Failure(); err != nil {
			tb.Fatal(err)
		}
		index++
		msgs := make([]*fsmv1.EnqueueMessage, perQueue)
		for j := range msgs {
			msgs[j] = &fsmv1.EnqueueMessage{Payload: []byte("0123456789"), FairnessKey: fmt.Sprint("k", j%keys)}
		}
		if perQueue > 0 {
			res = f.ApplyCommand(index, &fsmv1.Command{NowMs: nowMs, Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: name, Messages: msgs}}}}})
			er, err := fsm.As[*fsm.EnqueueResult](res, nil)
			if err == nil {
				err = er.Batches[0].Err
			}
			if err != nil {
				tb.Fatal(err)
			}
			index++
		}
	}
	return f
}

// TestQueueCollector: one queue's series, with ages measured against the
// collector's clock; no consumer series where the counter says this node
// keeps none.
func TestQueueCollector(t *testing.T) {
	enq := time.UnixMilli(1_700_000_000_000)
	f := buildState(t, 1, 3, 2, enq.UnixMilli())
	now := enq.Add(90 * time.Second)
	c := NewQueueCollector(f.Reader(), func(string) (int, bool) { return 0, false }, func() time.Time { return now }, nil)
	// Three messages of 10 payload bytes and a 2-byte fairness key, each
	// with the per-message overhead: 3 × (10 + 2 + 320).
	want := `
# HELP raftq_queue_bytes What the messages a queue holds cost: payload, headers, keys, ids and a per-message overhead (stats.bytes).
# TYPE raftq_queue_bytes gauge
raftq_queue_bytes{queue="q0000"} 996
raftq_queue_bytes{queue="q0000.dlq"} 0
# HELP raftq_queue_oldest_ready_age_seconds Age of the oldest ready message of a queue (0 when none is ready).
# TYPE raftq_queue_oldest_ready_age_seconds gauge
raftq_queue_oldest_ready_age_seconds{queue="q0000"} 90
raftq_queue_oldest_ready_age_seconds{queue="q0000.dlq"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "raftq_queue_bytes", "raftq_queue_oldest_ready_age_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "raftq_queue_consumers"); n != 0 {
		t.Errorf("%d consumer series on a node that keeps no registry", n)
	}
	// Two queues: q0000 and its default dead-letter queue.
	if n := testutil.CollectAndCount(c, "raftq_queue_messages"); n != 2*4 {
		t.Errorf("%d raftq_queue_messages series, want one per queue and state (8)", n)
	}
	if n := testutil.CollectAndCount(c, "raftq_queue_events_total"); n != 2*6 {
		t.Errorf("%d raftq_queue_events_total series, want one per queue and event (12)", n)
	}
	if err := testutil.CollectAndCompare(NewQueueCollector(f.Reader(), func(string) (int, bool) { return 2, true }, time.Now, nil), strings.NewReader(`
# HELP raftq_queue_consumers Consumers (Lease streams) registered on a queue; exported by the leader only.
# TYPE raftq_queue_consumers gauge
raftq_queue_consumers{queue="q0000"} 2
raftq_queue_consumers{queue="q0000.dlq"} 2
`), "raftq_queue_consumers"); err != nil {
		t.Error(err)
	}
}

// TestLeases: a settled lease is observed once; one never settled is
// forgotten once its deadline is past the grace, so the table stays
// bounded by live leases.
func TestLeases(t *testing.T) {
	l := NewLeases(time.Minute)
	t0 := time.UnixMilli(1_700_000_000_000)
	key := func(i int) LeaseKey { return LeaseKey{Queue: "q", ID: uint64(i), Token: 7} }
	l.Delivered([]Delivery{{Key: key(1), EnqueuedMs: t0.UnixMilli() - 2000, DeadlineMs: t0.Add(30 * time.Second).UnixMilli()}}, t0)
	l.Settled([]LeaseKey{key(1), key(1), {Queue: "q", ID: 1, Token: 8}}, t0.Add(3*time.Second))
	if got := testutil.CollectAndCount(l, "raftq_lease_duration_seconds"); got != 1 {
		t.Fatalf("%d duration series", got)
	}
	h := l.duration.WithLabelValues("q").(prometheus.Histogram)
	m := metricOf(t, h)
	if m.GetHistogram().GetSampleCount() != 1 || m.GetHistogram().GetSampleSum() != 3 {
		t.Errorf("lease duration: %d samples summing %v, want 1 of 3 s", m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum())
	}
	e := metricOf(t, l.enqueueToDelivery.WithLabelValues("q").(prometheus.Histogram))
	if e.GetHistogram().GetSampleSum() != 2 {
		t.Errorf("enqueue to delivery: %v s, want 2", e.GetHistogram().GetSampleSum())
	}

	// minPrune leases that expire unsettled, then one more delivery
	// two minutes later: the stale ones go.
	var ds []Delivery
	for i := range minPrune - 1 {
		ds = append(ds, Delivery{Key: key(100 + i), EnqueuedMs: t0.UnixMilli(), DeadlineMs: t0.Add(time.Second).UnixMilli()})
	}
	l.Delivered(ds, t0)
	if got := l.Tracked(); got != minPrune-1 {
		t.Fatalf("tracked %d, want %d", got, minPrune-1)
	}
	later := t0.Add(2 * time.Minute)
	l.Delivered([]Delivery{{Key: key(1), EnqueuedMs: later.UnixMilli(), DeadlineMs: later.Add(time.Minute).UnixMilli()}}, later)
	if got := l.Tracked(); got != 1 {
		t.Errorf("tracked %d after pruning, want only the live lease", got)
	}
	l.Forget("q")
	if got := testutil.CollectAndCount(l); got != 0 {
		t.Errorf("%d series after Forget", got)
	}
}

func metricOf(t *testing.T, c prometheus.Collector) *dtoMetric {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dtoMetric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// BenchmarkQueueCollector: one scrape of 1,000 queues (10 fairness keys
// each, 10,000 keys in all, 100 ready messages per queue) and their 1,000
// default dead-letter queues, with drain estimates, gathered as /metrics
// does before encoding.
// It reports the series count.
func BenchmarkQueueCollector(b *testing.B) {
	f := buildState(b, 1000, 100, 10, time.Now().UnixMilli())
	reg := prometheus.NewRegistry()
	drain := NewDrain(f.Reader(), time.Minute)
	drain.Sample(time.Now())
	drain.Sample(time.Now().Add(5 * time.Second))
	reg.MustRegister(NewQueueCollector(f.Reader(), func(string) (int, bool) { return 1, true }, time.Now, drain))
	b.ReportAllocs()
	series := 0
	for b.Loop() {
		fams, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		series = 0
		for _, fam := range fams {
			series += len(fam.GetMetric())
		}
	}
	b.ReportMetric(float64(series), "series")
}

type dtoMetric = dto.Metric

// BenchmarkQueueCollectorRead: the part of that scrape that holds the
// state's read lock (copying the numbers of 2,000 queues).
func BenchmarkQueueCollectorRead(b *testing.B) {
	f := buildState(b, 1000, 100, 10, time.Now().UnixMilli())
	c := NewQueueCollector(f.Reader(), nil, time.Now, nil)
	for b.Loop() {
		if n := len(c.read()); n != 2000 {
			b.Fatalf("%d queues", n)
		}
	}
}
