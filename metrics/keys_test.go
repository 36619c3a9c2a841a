package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// keyedState holds queue "q" with the given ready messages per fairness
// key (priority 0, and one message of key "k0" at priority 5, which the
// per-key count adds up across priorities).
func keyedState(t *testing.T, counts map[string]int) *fsm.FSM {
	t.Helper()
	f := fsm.New(fsm.Options{})
	if err := f.ApplyCommand(1, &fsmv1.Command{NowMs: 1, Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q"}}}).Failure(); err != nil {
		t.Fatal(err)
	}
	var msgs []*fsmv1.EnqueueMessage
	for k, n := range counts {
		for range n {
			msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: []byte("x"), FairnessKey: k})
		}
	}
	msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: []byte("x"), FairnessKey: "k0", Priority: 5})
	res := f.ApplyCommand(2, &fsmv1.Command{NowMs: 1, Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}})
	er, err := fsm.As[*fsm.EnqueueResult](res, nil)
	if err == nil {
		err = er.Batches[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestKeysCollectorTopN(t *testing.T) {
	st := keyedState(t, map[string]int{"k0": 4, "k1": 4, "k2": 3, "k3": 2, "k4": 1})
	buckets := func() []*raftqv1.ThrottleKeyStats {
		return []*raftqv1.ThrottleKeyStats{
			{Key: "full", Tokens: 10, Burst: 10},
			{Key: "empty", Tokens: 0, Burst: 10},
			{Key: "half", Tokens: 2, Burst: 4},
		}
	}
	leader := func(queue string) ([]*raftqv1.ThrottleKeyStats, bool) {
		if queue != "q" {
			return nil, true // the DLQ has no throttle rules
		}
		return buckets(), true
	}
	follower := func(string) ([]*raftqv1.ThrottleKeyStats, bool) { return nil, false }
	const readyHead = "# HELP raftq_fairness_key_ready_messages Ready messages of a fairness key: the queue's top N keys by ready messages (--metrics-top-keys), the rest summed under key=\"_other\".\n# TYPE raftq_fairness_key_ready_messages gauge\n"
	const tokensHead = "# HELP raftq_throttle_key_tokens Tokens in a throttle key's bucket (leader only): the queue's N emptiest buckets relative to their burst, the rest summed under key=\"_other\".\n# TYPE raftq_throttle_key_tokens gauge\n"
	for _, tc := range []struct {
		name      string
		top       int
		throttles ThrottleSource
		want      string
	}{
		{"top 2, ties by key", 2, leader, readyHead + `
raftq_fairness_key_ready_messages{key="_other",queue="q"} 6
raftq_fairness_key_ready_messages{key="k0",queue="q"} 5
raftq_fairness_key_ready_messages{key="k1",queue="q"} 4
` + tokensHead + `
raftq_throttle_key_tokens{key="_other",queue="q"} 10
raftq_throttle_key_tokens{key="empty",queue="q"} 0
raftq_throttle_key_tokens{key="half",queue="q"} 2
`},
		{"every key fits: no _other", 10, follower, readyHead + `
raftq_fairness_key_ready_messages{key="k0",queue="q"} 5
raftq_fairness_key_ready_messages{key="k1",queue="q"} 4
raftq_fairness_key_ready_messages{key="k2",queue="q"} 3
raftq_fairness_key_ready_messages{key="k3",queue="q"} 2
raftq_fairness_key_ready_messages{key="k4",queue="q"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewKeysCollector(st.Reader(), tc.throttles, tc.top)
			if err := testutil.CollectAndCompare(c, strings.NewReader(tc.want)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestKeysCollectorIsBounded: 10,000 keys in a queue give top N + 1 series,
// and the series sum to the queue's ready messages.
func TestKeysCollectorIsBounded(t *testing.T) {
	counts := map[string]int{}
	for i := range 10_000 {
		counts[fmt.Sprint("tenant-", i)] = 1 + i%3
	}
	st := keyedState(t, counts)
	c := NewKeysCollector(st.Reader(), nil, 5)
	if n := testutil.CollectAndCount(c, "raftq_fairness_key_ready_messages"); n != 6 {
		t.Errorf("%d series, want 5 keys + _other", n)
	}
	var want int
	for _, n := range counts {
		want += n
	}
	want++ // k0 at priority 5
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got += m.GetGauge().GetValue()
		}
	}
	if int(got) != want {
		t.Errorf("series sum to %v, want %d ready messages", got, want)
	}
}

// BenchmarkScrapeTopKeys: a whole scrape of the queue families at 1,000
// queues holding 10,000 fairness keys (10 each, plus 1,000 empty DLQs)
// and 5 throttle buckets per queue (none on the DLQs), with --metrics-top-keys off (0) and
// on. The series metric is what Prometheus would store per scrape.
func BenchmarkScrapeTopKeys(b *testing.B) {
	f := buildState(b, 1000, 100, 10, time.Now().UnixMilli())
	drain := NewDrain(f.Reader(), time.Minute)
	drain.Sample(time.Now())
	drain.Sample(time.Now().Add(5 * time.Second))
	throttles := func(queue string) ([]*raftqv1.ThrottleKeyStats, bool) {
		if strings.HasSuffix(queue, ".dlq") {
			return nil, true
		}
		out := make([]*raftqv1.ThrottleKeyStats, 5)
		for i := range out {
			out[i] = &raftqv1.ThrottleKeyStats{Key: fmt.Sprint("t", i), Tokens: float64(i), Burst: 10, RatePerSec: 1}
		}
		return out, true
	}
	for _, top := range []int{0, 3, 10} {
		b.Run(fmt.Sprintf("top=%d", top), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewQueueCollector(f.Reader(), func(string) (int, bool) { return 1, true }, time.Now, drain))
			if top > 0 {
				reg.MustRegister(NewKeysCollector(f.Reader(), throttles, top))
			}
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
		})
	}
}

// BenchmarkKeysCollectorRead: the part of a top-keys scrape that holds the
// state's read lock (every queue's per-key ready counts, 10,000 keys).
func BenchmarkKeysCollectorRead(b *testing.B) {
	f := buildState(b, 1000, 100, 10, time.Now().UnixMilli())
	c := NewKeysCollector(f.Reader(), nil, 3)
	for b.Loop() {
		if names, _ := c.readKeys(); len(names) != 2000 {
			b.Fatalf("%d queues", len(names))
		}
	}
}
