package fsm

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// grantNamed leases id to consumer id cid under the stream name name.
func (h *harness) grantNamed(q, cid, name string, vis int64, id uint64) *state.Delivery {
	h.t.Helper()
	token := (h.index+1)*0x9e3779b97f4a7c15 ^ 1
	g := &fsmv1.Grant{Queue: q, MessageId: id, ConsumerId: cid, ConsumerName: name, DeadlineMs: h.now + vis, LeaseToken: token}
	return as[*GrantResult](h.t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{g}}}})).Deliveries[0]
}

func (h *harness) nackWhy(d *state.Delivery, reason string) *ItemsResult {
	h.t.Helper()
	return as[*ItemsResult](h.t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), Reason: reason}}}}}))
}

func (h *harness) expire(d *state.Delivery) {
	h.t.Helper()
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(d)}}}})
}

func (h *harness) extend(d *state.Delivery, by int64) {
	h.t.Helper()
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: []*fsmv1.Ref{ref(d)}, ExtendByMs: by}}})
}

func (h *harness) message(q string, id uint64) *state.MessageInfo {
	h.t.Helper()
	mi, err := h.f.Reader().GetMessage(q, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return mi
}

func kinds(mi *state.MessageInfo) []string {
	var out []string
	for _, e := range mi.Events {
		out = append(out, e.Kind)
	}
	return out
}

func outcomes(d *state.Delivery) []string {
	var out []string
	for _, a := range d.History {
		out = append(out, a.Outcome+"/"+a.Consumer+"/"+a.Reason)
	}
	return out
}

// TestMessageHistory follows one message through every kind of event:
// its attempts (who, how each ended, why), last_error, its life events in
// order, and its state, through the DLQ, a redrive and an ack.
func TestMessageHistory(t *testing.T) {
	h := newHarness(t)
	h.raise(state.HistoryVersion)
	h.create("jobs", &fsmv1.QueueConfig{MaxDeliveries: 3, VisibilityTimeoutMs: 1000})
	id := h.enqueuePayloads("jobs", "p")[0]
	if mi := h.message("jobs", id); mi.State != "ready" || !slices.Equal(kinds(mi), []string{"enqueued"}) || mi.Delivery.History != nil {
		t.Fatalf("fresh message: state %s, events %v, history %v", mi.State, kinds(mi), mi.Delivery.History)
	}
	bytesBefore := h.info("jobs").Stats.Bytes

	leasedAt := h.now
	d := h.grantNamed("jobs", "c-1", "worker-a", 1000, id)
	if mi := h.message("jobs", id); mi.State != "in_flight" || !strings.Contains(mi.Events[1].Detail, "consumer worker-a, attempt 1") {
		t.Fatalf("leased: state %s, events %+v", mi.State, mi.Events)
	}
	h.now += 10
	if r := h.nackWhy(d, "boom"); r.Items[0] != nil {
		t.Fatal(r.Items[0])
	}
	d = h.grantNamed("jobs", "c-2", "", 1000, id) // no name: the consumer id
	if len(d.History) != 1 || d.History[0] != (state.Attempt{Attempt: 1, Consumer: "worker-a", LeasedAtMs: leasedAt, EndedAtMs: leasedAt + 10, Outcome: "nacked", Reason: "boom"}) || d.LastError != "boom" {
		t.Fatalf("second delivery: history %+v, last_error %q", d.History, d.LastError)
	}
	h.extend(d, 1000)
	h.extend(d, 1000)
	h.now += 5000
	h.expire(d)
	d = h.grantNamed("jobs", "c-3", "worker-c", 1000, id)
	if d.LastError != "lease expired" || !slices.Equal(outcomes(d), []string{"nacked/worker-a/boom", "expired/c-2/lease expired"}) {
		t.Fatalf("third delivery: history %v, last_error %q", outcomes(d), d.LastError)
	}
	h.nackWhy(d, "boom again") // the third: max_deliveries, to the DLQ

	mi := h.message("jobs", id)
	if mi.State != "dead_lettered" {
		t.Fatalf("state %s, want dead_lettered", mi.State)
	}
	want := []string{"enqueued", "leased", "nacked", "leased", "extended", "expired", "leased", "nacked", "dead_lettered"}
	if !slices.Equal(kinds(mi), want) {
		t.Fatalf("events %v, want %v", kinds(mi), want)
	}
	if !strings.Contains(mi.Events[4].Detail, "extended 2 times") || !strings.Contains(mi.Events[8].Detail, "to jobs.dlq: max_deliveries") {
		t.Fatalf("details: %q, %q", mi.Events[4].Detail, mi.Events[8].Detail)
	}
	peeked, err := h.f.Reader().Peek("jobs", 10, true)
	if err != nil || len(peeked) != 1 {
		t.Fatalf("peek dlq: %v %v", peeked, err)
	}
	if got := outcomes(peeked[0]); !slices.Equal(got, []string{"nacked/worker-a/boom", "expired/c-2/lease expired", "dead_lettered/worker-c/boom again"}) || peeked[0].LastError != "boom again" {
		t.Fatalf("DLQ peek: history %v, last_error %q", got, peeked[0].LastError)
	}
	// reason_contains matches last_error too (its dead_letter_reason is
	// max_deliveries).
	if got, err := h.f.Reader().PeekFiltered("jobs", 10, true, PeekFilter{ReasonContains: "again"}); err != nil || len(got) != 1 {
		t.Fatalf("a DLQ filter on last_error: %v %v", got, err)
	}
	if got := h.info("jobs.dlq").Stats.Bytes; got <= bytesBefore {
		t.Fatalf("the story costs nothing: %d bytes, %d before", got, bytesBefore)
	}

	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: "jobs"}}})
	mi = h.message("jobs", id)
	if mi.State != "ready" || mi.Delivery.Attempt != 0 || len(mi.Delivery.History) != 3 || kinds(mi)[len(mi.Events)-1] != "redriven" {
		t.Fatalf("redriven: state %s attempt %d history %d events %v", mi.State, mi.Delivery.Attempt, len(mi.Delivery.History), kinds(mi))
	}
	d = h.grantNamed("jobs", "c-4", "worker-d", 1000, id)
	if r := h.ack(d); r.Items[0] != nil {
		t.Fatal(r.Items[0])
	}
	mi = h.message("jobs", id)
	if mi.State != "acked" || mi.Delivery.Payload != nil || kinds(mi)[len(mi.Events)-1] != "acked" ||
		mi.Delivery.History[len(mi.Delivery.History)-1].Outcome != "acked" || mi.Events[len(mi.Events)-1].Detail != "by worker-d" {
		t.Fatalf("acked: %+v", mi)
	}
	// Once the outcome lapses, the message is gone.
	h.now += state.RecentWindowMs + 1
	h.tick()
	if _, err := h.f.Reader().GetMessage("jobs", id); !errors.Is(err, state.ErrMessageNotFound) {
		t.Fatalf("after the window: %v, want not found", err)
	}
}

// TestHistoryReleasedAndRolledBack: a consumer gone releases with
// "consumer disconnected"; a hand-back is released without a failure; a
// rollback (never delivered) leaves no trace and no cost.
func TestHistoryReleasedAndRolledBack(t *testing.T) {
	h := newHarness(t)
	h.raise(state.HistoryVersion)
	h.create("jobs", nil)
	id := h.enqueuePayloads("jobs", "p")[0]
	before := h.info("jobs").Stats.Bytes
	d := h.grantNamed("jobs", "c-1", "w", 1000, id)
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: []*fsmv1.Ref{ref(d)}}}})
	if mi := h.message("jobs", id); len(mi.Events) != 1 || h.info("jobs").Stats.Bytes != before {
		t.Fatalf("after a rollback: events %v, bytes %d (were %d)", kinds(mi), h.info("jobs").Stats.Bytes, before)
	}
	d = h.grantNamed("jobs", "c-1", "w", 1000, id)
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_ReleaseConsumer{ReleaseConsumer: &fsmv1.ReleaseConsumer{ConsumerId: "c-1"}}})
	d = h.grantNamed("jobs", "c-2", "v", 1000, id)
	if d.LastError != "consumer disconnected" || !slices.Equal(outcomes(d), []string{"released/w/consumer disconnected"}) {
		t.Fatalf("after release: %v %q", outcomes(d), d.LastError)
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), Uncounted: true}}}}})
	mi := h.message("jobs", id)
	if mi.Delivery.LastError != "consumer disconnected" || !slices.Equal(outcomes(mi.Delivery), []string{"released/w/consumer disconnected", "released/v/handed back unprocessed"}) {
		t.Fatalf("after a hand-back: %v %q", outcomes(mi.Delivery), mi.Delivery.LastError)
	}
}

// TestHistoryBounds: a reason past 1 KiB is refused and changes nothing;
// kept reasons are cut to 256 bytes at a rune boundary; 16 attempts and
// 64 events at most; the cost stays within MaxStoryBytes.
func TestHistoryBounds(t *testing.T) {
	if state.MaxStoryBytes != 46_832 {
		t.Fatalf("MaxStoryBytes is %d; docs/api.md says 46,832", state.MaxStoryBytes)
	}
	h := newHarness(t)
	h.raise(state.HistoryVersion)
	h.create("jobs", &fsmv1.QueueConfig{MaxDeliveries: 1000})
	id := h.enqueuePayloads("jobs", "p")[0]
	base := h.info("jobs").Stats.Bytes
	d := h.grantNamed("jobs", "c", "w", 1000, id)
	if r := h.nackWhy(d, strings.Repeat("x", state.MaxNackReasonBytes+1)); !errors.Is(r.Items[0], ErrInvalid) {
		t.Fatalf("a 1025-byte reason: %v, want invalid", r.Items[0])
	}
	if mi := h.message("jobs", id); mi.State != "in_flight" || len(mi.Events) != 2 {
		t.Fatalf("a refused nack changed the message: %s %v", mi.State, kinds(mi))
	}
	long := "x" + strings.Repeat("é", 500) // 1001 bytes: a two-byte rune across 256
	if r := h.nackWhy(d, long); r.Items[0] != nil {
		t.Fatal(r.Items[0])
	}
	mi := h.message("jobs", id)
	if got := mi.Delivery.History[0].Reason; len(got) > state.MaxAttemptReasonBytes || !utf8.ValidString(got) || !strings.HasPrefix(long, got) || len(got) < state.MaxAttemptReasonBytes-1 {
		t.Fatalf("kept reason is %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if mi.Delivery.LastError != long {
		t.Fatal("last_error is not the whole reason")
	}
	name := strings.Repeat("n", 255)
	for i := range 40 {
		d := h.grantNamed("jobs", "c", name, 1000, id)
		h.extend(d, 1000)
		h.nackWhy(d, long)
		if i == 0 {
			continue
		}
		st := h.info("jobs").Stats
		if extra := st.Bytes - base; extra > state.MaxStoryBytes {
			t.Fatalf("the story costs %d bytes, past its bound %d", extra, state.MaxStoryBytes)
		}
	}
	mi = h.message("jobs", id)
	if len(mi.Delivery.History) != state.MaxHistoryAttempts || len(mi.Events) != state.MaxMessageEvents || mi.Events[0].Kind != "enqueued" {
		t.Fatalf("%d attempts, %d events (first %s)", len(mi.Delivery.History), len(mi.Events), mi.Events[0].Kind)
	}
	if last := mi.Delivery.History[state.MaxHistoryAttempts-1]; last.Attempt != 41 {
		t.Fatalf("the newest attempt kept is %d, want 41 (oldest first)", last.Attempt)
	}
}

// TestHistoryNotRecordedBeforeItsVersion: entries of the older version
// record nothing, cost nothing more and take any reason, as before;
// GetMessage still answers from what the message holds.
func TestHistoryNotRecordedBeforeItsVersion(t *testing.T) {
	h := newHarness(t)
	h.raise(state.HistoryVersion - 1)
	h.create("jobs", nil)
	id := h.enqueuePayloads("jobs", "p")[0]
	before := h.info("jobs").Stats.Bytes
	d := h.grantNamed("jobs", "c", "w", 1000, id)
	if r := h.nackWhy(d, strings.Repeat("x", 2000)); r.Items[0] != nil {
		t.Fatalf("an old entry's long reason: %v", r.Items[0])
	}
	mi := h.message("jobs", id)
	if len(mi.Events) != 1 || mi.Delivery.History != nil || mi.Delivery.LastError != "" || h.info("jobs").Stats.Bytes != before {
		t.Fatalf("an old entry recorded a story: %v %v %q", kinds(mi), mi.Delivery.History, mi.Delivery.LastError)
	}
}

// TestHistorySnapshotRoundTrip: stories (in queues, in the DLQ, leased
// mid-attempt) and acked messages kept among the recent outcomes survive
// a snapshot and restore; the digest covers them (it differs between
// states that differ only in a story).
func TestHistorySnapshotRoundTrip(t *testing.T) {
	build := func(reason string) (*harness, []uint64) {
		h := newHarness(t)
		h.raise(state.HistoryVersion)
		h.create("jobs", &fsmv1.QueueConfig{MaxDeliveries: 2})
		ids := h.enqueuePayloads("jobs", "a", "b", "c")
		d := h.grantNamed("jobs", "c", "w", 1000, ids[0])
		h.nackWhy(d, reason)
		d = h.grantNamed("jobs", "c", "w", 1000, ids[0])
		h.nackWhy(d, reason) // to the DLQ
		d = h.grantNamed("jobs", "c", "w", 1000, ids[1])
		h.ack(d)
		h.grantNamed("jobs", "c", "w", 1000, ids[2]) // leased, mid-attempt
		return h, ids
	}
	h, ids := build("boom")
	r := restoredCopy(t, h)
	if digestOf(t, h.f) != digestOf(t, r.f) {
		t.Fatal("digest differs after restore")
	}
	states := []string{"dead_lettered", "acked", "in_flight"}
	for i, id := range ids {
		a, b := h.message("jobs", id), r.message("jobs", id)
		if a.State != states[i] || a.State != b.State || !slices.Equal(kinds(a), kinds(b)) || !slices.Equal(outcomes(a.Delivery), outcomes(b.Delivery)) ||
			a.Delivery.LastError != b.Delivery.LastError || len(a.Events) < 2 {
			t.Fatalf("message %d differs after restore: %+v vs %+v", i, a, b)
		}
	}
	// The restored replica goes on alike: the leased one's lease ends
	// the same way on both, attempt and all.
	for _, x := range []*harness{h, r} {
		x.now += 5000
		x.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: x.leaseRefs("jobs", ids[2])}}})
	}
	if digestOf(t, h.f) != digestOf(t, r.f) || !slices.Equal(outcomes(h.message("jobs", ids[2]).Delivery), outcomes(r.message("jobs", ids[2]).Delivery)) {
		t.Fatal("the restored replica diverged")
	}
	boom, _ := build("boom")
	bang, _ := build("bang")
	if digestOf(t, boom.f) == digestOf(t, bang.f) {
		t.Fatal("the digest does not cover the story's reasons")
	}
}

// leaseRefs is the ref of message id's current lease.
func (h *harness) leaseRefs(q string, id uint64) []*fsmv1.Ref {
	h.t.Helper()
	var token uint64
	h.f.Reader().Read(func(v state.View) { _, token, _ = v.Lease(q, id) })
	return []*fsmv1.Ref{{Queue: q, MessageId: id, LeaseToken: token}}
}
