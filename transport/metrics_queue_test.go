package transport_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
)

// scrape GETs /metrics from n's HTTP handler and returns the text and the
// parsed families.
func scrape(t *testing.T, n *testcluster.Node) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	rec := httptest.NewRecorder()
	n.API().HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s /metrics: %d %s", n.ID, rec.Code, rec.Body)
	}
	text := rec.Body.String()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s /metrics does not parse: %v", n.ID, err)
	}
	return text, fams
}

// sample finds the value of family name with exactly the given labels;
// ok is false when there is no such series.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		if len(m.Label)*2 != len(labels) {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestQueueMetricsMatchGetQueue: after a mixed workload (enqueues, a
// delayed message, deliveries, acks, a nack, a dead-lettering), every
// node's /metrics reports each queue's numbers exactly as GetQueue does,
// the leader adds consumers and its lease histograms, and a Lease stream
// the client cancels counts as OK.
func TestQueueMetricsMatchGetQueue(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.Leader()
	queues := []string{"mq-orders", "mq-mail"}
	for _, q := range queues {
		mustCreate(t, l, q, &raftqv1.QueueConfig{DeadLetterQueue: q + "-dlq"})
	}
	ctx := tctx(t, 30*time.Second)
	f := c.Followers()[0]
	// Enqueue through a follower too: it forwards.
	mustEnqueue(t, f, "mq-orders", []byte("a"), []byte("bb"), []byte("ccc"), []byte("dddd"), []byte("eeeee"))
	mustEnqueue(t, l, "mq-mail", []byte("x"), []byte("yy"))
	if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "mq-orders", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("later"), DelayMs: time.Hour.Milliseconds()}}}); err != nil {
		t.Fatal(err)
	}

	leaseCount := func(code codes.Code) float64 {
		v, _ := sample(scrapeFams(t, l), "raftq_rpc_total", "method", raftqv1.Broker_Lease_FullMethodName, "code", code.String())
		return v
	}
	okBefore, canceledBefore := leaseCount(codes.OK), leaseCount(codes.Canceled)

	sctx, cancelStream := context.WithCancel(ctx)
	stream, err := l.Broker.Lease(sctx, &raftqv1.LeaseRequest{Queue: "mq-orders", ConsumerName: "metrics-test", MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, stream, 4)
	if _, err := l.Broker.Ack(ctx, &raftqv1.AckRequest{Queue: "mq-orders", Acks: refsOf(ds[:2])}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "mq-orders", Nacks: []*raftqv1.NackItem{
		{MessageId: ds[2].Id, LeaseToken: ds[2].LeaseToken, DelayMs: time.Hour.Milliseconds()},
		{MessageId: ds[3].Id, LeaseToken: ds[3].LeaseToken, DeadLetter: true, Reason: "bad"},
	}}); err != nil {
		t.Fatal(err)
	}
	// The fifth message is granted now that credit is free; wait for it,
	// so the state is settled (one in flight) before comparing.
	recvN(t, stream, 1)

	// Every node, compared with what GetQueue says (through the leader).
	c.Synced()
	for _, n := range c.Nodes {
		_, fams := scrape(t, n)
		for _, q := range append(queues, "mq-orders-dlq") {
			st := queueInfo(t, l, q).GetStats()
			want := map[string]float64{
				"ready": float64(st.Ready), "delayed": float64(st.Delayed),
				"in_flight": float64(st.InFlight), "dead_lettered": float64(st.DeadLettered),
			}
			for state, w := range want {
				if got, ok := sample(fams, "raftq_queue_messages", "queue", q, "state", state); !ok || got != w {
					t.Errorf("%s: raftq_queue_messages{queue=%q,state=%q} = %v (present %v), GetQueue says %v", n.ID, q, state, got, ok, w)
				}
			}
			if got, _ := sample(fams, "raftq_queue_bytes", "queue", q); got != float64(st.Bytes) {
				t.Errorf("%s: raftq_queue_bytes{%s} = %v, GetQueue says %d", n.ID, q, got, st.Bytes)
			}
			events := map[string]float64{
				"enqueued": float64(st.EnqueuedTotal), "acked": float64(st.AckedTotal),
				"nacked": float64(st.NackedTotal), "expired": float64(st.ExpiredTotal),
			}
			for ev, w := range events {
				if got, ok := sample(fams, "raftq_queue_events_total", "queue", q, "event", ev); !ok || got != w {
					t.Errorf("%s: raftq_queue_events_total{queue=%q,event=%q} = %v (present %v), GetQueue says %v", n.ID, q, ev, got, ok, w)
				}
			}
			consumers, hasConsumers := sample(fams, "raftq_queue_consumers", "queue", q)
			if n == l && (!hasConsumers || consumers != float64(st.Consumers)) {
				t.Errorf("leader: raftq_queue_consumers{%s} = %v (present %v), GetQueue says %d", q, consumers, hasConsumers, st.Consumers)
			}
			if n != l && hasConsumers {
				t.Errorf("follower %s exports raftq_queue_consumers{%s}: only the leader knows consumers", n.ID, q)
			}
		}
		// Replica-local event counters: five grants, one dead-lettering.
		if got, _ := sample(fams, "raftq_queue_events_total", "queue", "mq-orders", "event", "delivered"); got != 5 {
			t.Errorf("%s: delivered = %v, want 5", n.ID, got)
		}
		if got, _ := sample(fams, "raftq_queue_events_total", "queue", "mq-orders", "event", "dead_lettered"); got != 1 {
			t.Errorf("%s: dead_lettered = %v, want 1", n.ID, got)
		}
		// mq-mail's two messages are ready; the oldest is younger than the test.
		if age, ok := sample(fams, "raftq_queue_oldest_ready_age_seconds", "queue", "mq-mail"); !ok || age < 0 || age > 60 {
			t.Errorf("%s: oldest ready age of mq-mail = %v (present %v)", n.ID, age, ok)
		}
		if age, _ := sample(fams, "raftq_queue_oldest_ready_age_seconds", "queue", "mq-orders"); age != 0 {
			t.Errorf("%s: mq-orders has nothing ready, oldest ready age = %v", n.ID, age)
		}
		if got, _ := sample(fams, "raftq_raft_applied_index"); got == 0 {
			t.Errorf("%s: raftq_raft_applied_index is 0", n.ID)
		}
		if got, _ := sample(fams, "raftq_gossip_members", "state", "alive"); got != 3 {
			t.Errorf("%s: %v alive gossip members, want 3", n.ID, got)
		}
		leader, _ := sample(fams, "raftq_raft_leader")
		if (leader == 1) != (n == l) {
			t.Errorf("%s: raftq_raft_leader = %v", n.ID, leader)
		}
		if got, _ := sample(fams, "raftq_raft_leader_changes_total"); got < 1 {
			t.Errorf("%s: raftq_raft_leader_changes_total = %v, want >= 1", n.ID, got)
		}
		if _, ok := sample(fams, "raftq_data_dir_free_bytes"); !ok {
			t.Errorf("%s: no raftq_data_dir_free_bytes", n.ID)
		}
		// Every node appended the workload's entries to its own log.
		appends, _ := sample(fams, "raftq_raft_log_append_seconds")
		fsyncs, _ := sample(fams, "raftq_raft_log_fsync_seconds")
		if appends == 0 || fsyncs != appends {
			t.Errorf("%s: %v log appends timed, %v fsyncs; want some, one per append", n.ID, appends, fsyncs)
		}
	}

	text, fams := scrape(t, l)
	if got, _ := sample(fams, "raftq_enqueue_to_delivery_seconds", "queue", "mq-orders"); got != 5 {
		t.Errorf("raftq_enqueue_to_delivery_seconds{mq-orders} counts %v deliveries, want 5", got)
	}
	if got, _ := sample(fams, "raftq_lease_duration_seconds", "queue", "mq-orders"); got != 4 {
		t.Errorf("raftq_lease_duration_seconds{mq-orders} counts %v settled leases, want 4 (2 acks, 2 nacks)", got)
	}
	for _, fol := range c.Followers() {
		if lag, ok := sample(fams, "raftq_raft_follower_lag_entries", "follower", fol.ID); !ok || lag < 0 {
			t.Errorf("no follower lag for %s (%v)", fol.ID, lag)
		}
	}
	t.Run("promtool", func(t *testing.T) { promtoolCheck(t, text) })

	// A snapshot on a follower is counted there, with its size.
	before, _ := sample(scrapeFams(t, f), "raftq_snapshots_total")
	if _, err := f.ClusterNode().Group().Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	_, ffams := scrape(t, f)
	if n, _ := sample(ffams, "raftq_snapshots_total"); n != before+1 {
		t.Errorf("%s: raftq_snapshots_total = %v after one more snapshot than %v", f.ID, n, before)
	}
	if size, _ := sample(ffams, "raftq_snapshot_last_bytes"); size <= 0 {
		t.Errorf("%s: raftq_snapshot_last_bytes = %v", f.ID, size)
	}
	if n, ok := sample(ffams, "raftq_raft_entries_since_snapshot"); !ok || n >= cluster.DefaultSnapshotThreshold {
		t.Errorf("%s: raftq_raft_entries_since_snapshot = %v (present %v) just after a snapshot", f.ID, n, ok)
	}
	if n, ok := sample(ffams, "raftq_snapshot_failures_total"); !ok || n != 0 {
		t.Errorf("%s: raftq_snapshot_failures_total = %v (present %v), want 0", f.ID, n, ok)
	}

	// The client cancels its stream: a normal end, counted OK.
	cancelStream()
	waitUntil(t, 10*time.Second, "the cancelled Lease stream to be counted", func() error {
		if got := leaseCount(codes.OK) - okBefore; got != 1 {
			return fmt.Errorf("Lease OK counted %v times", got)
		}
		return nil
	})
	if got := leaseCount(codes.Canceled) - canceledBefore; got != 0 {
		t.Errorf("a client-cancelled Lease stream counted as Canceled %v times", got)
	}
}

func scrapeFams(t *testing.T, n *testcluster.Node) map[string]*dto.MetricFamily {
	t.Helper()
	_, f := scrape(t, n)
	return f
}

// promtoolCheck lints an exposition with `promtool check metrics` (names,
// units, help text), where promtool is installed.
func promtoolCheck(t *testing.T, text string) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus brings it); the exposition was only parsed")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}
