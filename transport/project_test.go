package transport

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	qmetrics "github.com/raftq/raftq/metrics"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func TestIDFormatRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 1 << 20, 1<<64 - 1} {
		got, err := ParseID(FormatID(v))
		if err != nil || got != v {
			t.Fatalf("round trip %d: %d %v", v, got, err)
		}
	}
	for _, s := range []string{"", "xyz", "000000000000000g", "00000000000000001"} {
		if _, err := ParseID(s); !errors.Is(err, fsm.ErrInvalid) {
			t.Fatalf("ParseID(%q) = %v", s, err)
		}
	}
	if FormatID(1<<20|3) != "0000000000100003" {
		t.Fatalf("FormatID = %s", FormatID(1<<20|3))
	}
}

// TestFormatIDs: a batch's ids, formatted into one string, are each
// FormatID's form of the id at the same position, for 0, 1 and many ids.
func TestFormatIDs(t *testing.T) {
	for _, ids := range [][]uint64{nil, {7}, {0, 1<<64 - 1, 42}, make([]uint64, 1000)} {
		got := formatIDs(ids)
		if len(got) != len(ids) {
			t.Fatalf("formatIDs(%d ids) = %d strings", len(ids), len(got))
		}
		for i, id := range ids {
			if got[i] != FormatID(id) {
				t.Fatalf("formatIDs(...)[%d] = %q, want %q", i, got[i], FormatID(id))
			}
		}
	}
	ids := make([]uint64, 1000)
	for i := range ids {
		ids[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	for i, s := range formatIDs(ids) {
		if v, err := ParseID(s); err != nil || v != ids[i] {
			t.Fatalf("id %d: %q parses to %d, %v; want %d", i, s, v, err, ids[i])
		}
	}
	if n := testing.AllocsPerRun(100, func() { formatIDs(ids) }); n > 2 {
		t.Errorf("formatIDs of 1,000 ids: %.0f allocations, want 2 (the slice and one string)", n)
	}
}

// TestItemResults: each item's result says its outcome (an error names
// the item, its message and queue, with the error's code), and a batch's
// results take two allocations however many items it has (65 for 64
// before they shared one array).
func TestItemResults(t *testing.T) {
	ids := []string{"0000000000000001", "0000000000000002", "0000000000000003"}
	got := itemResults("jobs", "acks", func(i int) string { return ids[i] }, []error{nil, fsm.ErrMessageNotFound, nil})
	if len(got) != 3 || !got[0].Ok || !got[2].Ok || got[0].Code != 0 || got[0].Error != "" {
		t.Fatalf("results = %v", got)
	}
	if got[1].Ok || got[1].Code != 5 /* NOT_FOUND */ || !strings.HasPrefix(got[1].Error, "acks[1]: message 0000000000000002 of queue jobs: ") {
		t.Fatalf("refused item = %v", got[1])
	}
	items := make([]error, 64)
	if n := testing.AllocsPerRun(100, func() { itemResults("jobs", "acks", nil, items) }); n > 2 {
		t.Errorf("itemResults of 64 items: %.0f allocations, want 2", n)
	}
}

func TestProjectDelivery(t *testing.T) {
	d := &state.Delivery{ID: 1 << 20, Queue: "q", Payload: []byte("p"), Attempt: 2, EnqueuedMs: 5, OriginQueue: "o", DeadLetterReason: "r"}
	got := projectDelivery(d)
	if got.Id != "0000000000100000" || got.Queue != "q" || string(got.Payload) != "p" || got.Attempt != 2 || got.EnqueuedAtMs != 5 ||
		got.OriginQueue != "o" || got.DeadLetterReason != "r" {
		t.Fatalf("projected %v", got)
	}
	if got.LeaseToken != "" || got.LeaseDeadlineMs != 0 {
		t.Fatalf("an unleased message shows a lease: %v", got)
	}
	d.LeaseToken, d.LeaseDeadlineMs = 7, 99
	if got := projectDelivery(d); got.LeaseToken != "0000000000000007" || got.LeaseDeadlineMs != 99 {
		t.Fatalf("lease projected as %q %d", got.LeaseToken, got.LeaseDeadlineMs)
	}
}

func TestProjectQueue(t *testing.T) {
	q := &state.QueueInfo{Name: "q", IsDeadLetterQueue: true, Config: &fsmv1.QueueConfig{MaxDeliveries: 3},
		Stats: state.QueueStats{Ready: 1, Delayed: 2, InFlight: 3, DeadLettered: 4, EnqueuedTotal: 5, AckedTotal: 6, NackedTotal: 7, ExpiredTotal: 8, Bytes: 9}}
	got := projectQueue(q)
	st := got.Stats
	if got.Name != "q" || !got.IsDeadLetterQueue || got.Config.MaxDeliveries != 3 ||
		st.Ready != 1 || st.Delayed != 2 || st.InFlight != 3 || st.DeadLettered != 4 || st.EnqueuedTotal != 5 ||
		st.AckedTotal != 6 || st.NackedTotal != 7 || st.ExpiredTotal != 8 || st.Bytes != 9 {
		t.Fatalf("projected %v", got)
	}
}

func TestProjectBrokerQueueDrain(t *testing.T) {
	qi := &state.QueueInfo{Name: "q", Config: &fsmv1.QueueConfig{}}
	if got := projectBrokerQueue(&broker.Queue{QueueInfo: qi}); got.Drain != nil {
		t.Fatalf("a queue not sampled yet has a drain estimate: %v", got.Drain)
	}
	got := projectBrokerQueue(&broker.Queue{QueueInfo: qi, Consumers: 2, Drain: &qmetrics.DrainEstimate{
		State: qmetrics.DrainDraining, Depth: 10, DepthChangePerSec: -2, DeliveriesPerSec: 3, EmptiesIn: 5 * time.Second,
	}})
	d := got.Drain
	if got.Stats.Consumers != 2 || d.State != "draining" || d.DepthChangePerSec != -2 || d.DeliveriesPerSec != 3 || d.EmptiesInSec != 5 {
		t.Fatalf("projected %v", got)
	}
}
