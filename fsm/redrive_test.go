package fsm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// deadLetterScenario fills q's DLQ: per key a and b, three messages
// nacked to the DLQ with reasons "timeout", "bad input", "timeout again",
// one second apart. It returns the ids in dead-letter order.
func deadLetterScenario(h *harness) []uint64 {
	h.t.Helper()
	h.create("q", nil)
	var out []uint64
	for _, reason := range []string{"timeout", "bad input", "timeout again"} {
		for _, key := range []string{"a", "b"} {
			id := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte(key + ":" + reason), FairnessKey: key})[0]
			d := h.grant("q", "c", 30_000, id)[0]
			h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), DeadLetter: true, Reason: reason}}}}})
			out = append(out, id)
		}
		h.now += 1000
	}
	h.tick()
	return out
}

func redriveOp(r *fsmv1.Redrive) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: r}}
}

func stepOp(refs ...*fsmv1.RedriveJobRef) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_RedriveStep{RedriveStep: &fsmv1.RedriveStep{Jobs: refs}}}
}

func (h *harness) peekDLQ(pf PeekFilter) []string {
	h.t.Helper()
	ds, err := h.f.Reader().PeekFiltered("q", 100, true, pf)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Payload))
	}
	return out
}

func TestPeekFilters(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	ids := deadLetterScenario(h)
	for _, c := range []struct {
		name string
		pf   PeekFilter
		want []string
	}{
		{"key", PeekFilter{FairnessKey: "a"}, []string{"a:timeout", "a:bad input", "a:timeout again"}},
		{"reason", PeekFilter{ReasonContains: "timeout"}, []string{"a:timeout", "b:timeout", "a:timeout again", "b:timeout again"}},
		{"key and reason", PeekFilter{FairnessKey: "b", ReasonContains: "bad"}, []string{"b:bad input"}},
		// now is 3 s after the first pair was dead-lettered, 1 s after the last.
		{"older than 1.5 s", PeekFilter{OlderThanMs: 1500}, []string{"a:timeout", "b:timeout", "a:bad input", "b:bad input"}},
		{"older than 2 s", PeekFilter{OlderThanMs: 2000}, []string{"a:timeout", "b:timeout", "a:bad input", "b:bad input"}},
		{"older than 2.5 s", PeekFilter{OlderThanMs: 2500}, []string{"a:timeout", "b:timeout"}},
		{"after id", PeekFilter{AfterID: ids[3]}, []string{"a:timeout again", "b:timeout again"}},
		{"after the last id", PeekFilter{AfterID: ^uint64(0)}, nil},
		{"nothing matches", PeekFilter{ReasonContains: "nope"}, nil},
	} {
		if got := h.peekDLQ(c.pf); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDryRunMovesNothingAndRecordsNoKey(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	deadLetterScenario(h)
	// A replica that applies a Tick instead: the dry run must leave the
	// same state (the digest covers the clock and index, so both move).
	other := restoredCopy(t, h)
	settled := h.info("q").Stats.RecentSettled
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", ReasonContains: "timeout", DryRun: true, IdempotencyKey: "k"})))
	if res.Count != 4 {
		t.Fatalf("dry run counted %d, want 4", res.Count)
	}
	other.tick()
	if a, b := digestOf(t, h.f), digestOf(t, other.f); a != b {
		t.Fatal("a dry run changed the state")
	}
	if qi := h.info("q"); qi.Stats.DeadLettered != 6 || qi.Stats.Ready != 0 || qi.Stats.RecentSettled != settled {
		t.Fatalf("after a dry run: %+v", qi.Stats)
	}
	// The same key, for real: the dry run did not record it.
	if res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", ReasonContains: "timeout", IdempotencyKey: "k"}))); res.Count != 4 {
		t.Fatalf("redrive after a dry run with its key moved %d, want 4", res.Count)
	}
	if got := h.readyIDs("q"); len(got) != 4 {
		t.Fatalf("ready after the redrive: %q", got)
	}
	// Its retry moves nothing more and answers as the first.
	if res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", IdempotencyKey: "k"}))); res.Count != 4 {
		t.Fatalf("retried redrive answered %d, want 4", res.Count)
	}
	if qi := h.info("q"); qi.Stats.DeadLettered != 2 {
		t.Fatalf("dead-lettered %d after the retry, want 2", qi.Stats.DeadLettered)
	}
}

func TestRedriveByIDsAndFilters(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	ids := deadLetterScenario(h)
	// ids[0] is a:timeout, ids[1] b:timeout; 12345 is no message; the
	// key filter drops ids[1].
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", MessageIds: []uint64{ids[1], 12345, ids[0], ids[0]}, FairnessKey: "a"})))
	if res.Count != 1 {
		t.Fatalf("moved %d, want 1 (ids not in the DLQ are not counted)", res.Count)
	}
	if got := h.readyIDs("q"); !slices.Equal(got, []string{"a:timeout"}) {
		t.Fatalf("ready %q", got)
	}
	if res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", OlderThanMs: 2500, Limit: 5}))); res.Count != 1 {
		t.Fatalf("older_than moved %d, want 1 (b:timeout; a:timeout went already)", res.Count)
	}
	for _, bad := range []*fsmv1.Redrive{
		{Queue: "q", OlderThanMs: -1},
		{Queue: "q", ReasonContains: string(make([]byte, state.MaxReasonFilterLen+1))},
		{Queue: "q", RateMilli: -5},
		{Queue: "q", MessageIds: make([]uint64, state.MaxRedriveIDs+1)},
	} {
		if err := h.apply(redriveOp(bad)).Failure(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v, want invalid", bad, err)
		}
	}
}

// Before the version an entry's new fields are ignored, as older builds
// ignore them: a filtered dry run moves everything.
func TestRedriveFieldsIgnoredBeforeTheirVersion(t *testing.T) {
	h, plain := newHarness(t), newHarness(t)
	for _, x := range []*harness{h, plain} {
		x.raise(state.RedriveVersion - 1)
		deadLetterScenario(x)
	}
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", FairnessKey: "a", ReasonContains: "x", DryRun: true, RateMilli: 1000, OlderThanMs: -1, MessageIds: []uint64{1}})))
	if res.Count != 6 || res.Job != 0 {
		t.Fatalf("version-%d redrive: %d moved, job %d; want all 6, no job", state.RedriveVersion-1, res.Count, res.Job)
	}
	// Exactly what the entry without them does (an older build's view).
	plain.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q"}))
	if a, b := digestOf(t, h.f), digestOf(t, plain.f); a != b {
		t.Fatal("a version-13 redrive with the new fields left another state than one without them")
	}
	if err := h.apply(stepOp(&fsmv1.RedriveJobRef{Queue: "q", Id: 1})).Failure(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("RedriveStep before its version: %v, want an unknown command", err)
	}
}

// Messages dead-lettered before the cluster reached the version have no
// time of their own: they count as dead-lettered when it did.
func TestOlderThanCountsFromTheUpgrade(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion - 1)
	deadLetterScenario(h)
	h.now += 10_000
	h.raise(state.RedriveVersion)
	if got := h.peekDLQ(PeekFilter{OlderThanMs: 1}); got != nil {
		t.Fatalf("older than 1 ms right after the upgrade: %q", got)
	}
	h.now += 5000
	h.tick()
	if got := h.peekDLQ(PeekFilter{OlderThanMs: 5000}); len(got) != 6 {
		t.Fatalf("older than 5 s, 5 s after the upgrade: %q", got)
	}
	if got := h.peekDLQ(PeekFilter{OlderThanMs: 5001}); got != nil {
		t.Fatalf("older than 5.001 s, 5 s after the upgrade: %q", got)
	}
}

// jobScenario puts n messages of q in its DLQ (max_deliveries 1).
func jobScenario(h *harness, n int) {
	h.t.Helper()
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 1})
	for i := 0; i < n; i++ {
		id := h.enqueuePayloads("q", fmt.Sprint(i))[0]
		d := h.grant("q", "c", 30_000, id)[0]
		h.nack(d, 0, false)
	}
}

func (h *harness) jobs(q string) []state.RedriveJobInfo { return h.info(q).Redrives }

func TestRateLimitedRedriveKeepsToItsRate(t *testing.T) {
	const n, rate = 35, 10 // 10 per second: a burst of 10, then 1 per 100 ms
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	jobScenario(h, n)
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: rate * 1000, IdempotencyKey: "k"})))
	if res.Count != n || res.Job == 0 {
		t.Fatalf("job answered %d (job %d), want %d and a job", res.Count, res.Job, n)
	}
	if h.info("q").Stats.Ready != 0 {
		t.Fatal("a rate-limited redrive moved messages before its first step")
	}
	// A retry names the same job and starts no other.
	if again := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: rate * 1000, IdempotencyKey: "k"}))); again.Count != n || again.Job != res.Job || len(h.jobs("q")) != 1 {
		t.Fatalf("retry: %d, job %d, %d jobs; want %d, job %d, 1 job", again.Count, again.Job, len(h.jobs("q")), n, res.Job)
	}
	start := h.now
	job := &fsmv1.RedriveJobRef{Queue: "q", Id: res.Job}
	moved := int64(0)
	var finished int64
	for step := 0; step < 1000 && finished == 0; step++ {
		got := as[*CountResult](t, h.mustOK(stepOp(job))).Count
		moved += got
		el := h.now - start
		if limit := int64(rate) + int64(rate)*el/1000; moved > limit {
			t.Fatalf("at %d ms moved %d, more than %d", el, moved, limit)
		}
		if ready := h.info("q").Stats.Ready; ready != moved {
			t.Fatalf("ready %d, moved %d", ready, moved)
		}
		if js := h.jobs("q"); len(js) == 0 {
			finished = el
		} else if js[0].Moved != moved || js[0].Total != n {
			t.Fatalf("job shows %d of %d, moved %d", js[0].Moved, js[0].Total, moved)
		}
		h.now += 37 // steps more often than the rate allows moves
	}
	if moved != n {
		t.Fatalf("moved %d, want %d", moved, n)
	}
	if minMs := int64((n - rate) * 1000 / rate); finished < minMs {
		t.Fatalf("finished after %d ms, the rate allows no less than %d", finished, minMs)
	}
	if again := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: rate * 1000, IdempotencyKey: "k"}))); again.Count != n || again.Job != 0 {
		t.Fatalf("retry after it finished: %d, job %d; want %d, none", again.Count, again.Job, n)
	}
}

// A job counts what was dead-lettered up to its own entry: a message
// dead-lettered later is not its to move.
func TestJobMovesWhatItCounted(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	jobScenario(h, 3)
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: 1000})))
	id := h.enqueuePayloads("q", "late")[0]
	h.nack(h.grant("q", "c", 30_000, id)[0], 0, false)
	for i := 0; i < 10 && len(h.jobs("q")) > 0; i++ {
		h.mustOK(stepOp(&fsmv1.RedriveJobRef{Queue: "q", Id: res.Job}))
		h.now += 1000
	}
	if got := h.readyIDs("q"); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Fatalf("ready %q, want the three it counted", got)
	}
	if h.info("q").Stats.DeadLettered != 1 {
		t.Fatal("the late message left the DLQ")
	}
}

func TestRedriveJobsAreBounded(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	jobScenario(h, 1)
	settled := h.info("q").Stats.RecentSettled
	for i := 0; i < state.MaxRedriveJobs; i++ {
		h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: 1}))
	}
	if err := h.apply(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: 1, IdempotencyKey: "x"})).Failure(); !errors.Is(err, ErrLimit) {
		t.Fatalf("job %d: %v, want ErrLimit", state.MaxRedriveJobs+1, err)
	}
	if h.info("q").Stats.RecentSettled != settled {
		t.Fatal("a refused redrive recorded its key")
	}
	// Deleting the queue ends them.
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "q"}}})
}

// A job is state: a replica restored mid-job has the same digest and
// steps it alike; the digest covers the job's progress.
func TestRedriveJobTravels(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveVersion)
	jobScenario(h, 30)
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: 5000})))
	ref := &fsmv1.RedriveJobRef{Queue: "q", Id: res.Job}
	h.mustOK(stepOp(ref))
	h.now += 1000
	d0 := digestOf(t, h.f)
	h.mustOK(stepOp(ref))
	if d1 := digestOf(t, h.f); d1 == d0 {
		t.Fatal("a step changed nothing the digest sees")
	}
	r := restoredCopy(t, h)
	if a, b := digestOf(t, h.f), digestOf(t, r.f); a != b {
		t.Fatalf("restored digest %s, live %s", b, a)
	}
	if got, want := r.jobs("q"), h.jobs("q"); !slices.Equal(got, want) {
		t.Fatalf("restored jobs %+v, live %+v", got, want)
	}
	for _, x := range []*harness{h, r} {
		for i := 0; i < 10; i++ {
			x.now += 1000
			x.mustOK(stepOp(ref))
		}
	}
	if a, b := digestOf(t, h.f), digestOf(t, r.f); a != b {
		t.Fatalf("after stepping both: restored digest %s, live %s", b, a)
	}
	if len(h.jobs("q")) != 0 || h.info("q").Stats.Ready != 30 {
		t.Fatalf("job not finished: %+v, ready %d", h.jobs("q"), h.info("q").Stats.Ready)
	}
}

// A job can be cancelled: what it moved stays moved, nothing more moves,
// a retry with the same key answers as the first, an unknown job is not
// found.
func TestCancelRedriveJob(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveCancelVersion)
	jobScenario(h, 20)
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: 5000})))
	ref := &fsmv1.RedriveJobRef{Queue: "q", Id: res.Job}
	h.mustOK(stepOp(ref)) // the burst: 5
	cancel := &fsmv1.Redrive{Queue: "q", CancelJob: res.Job, IdempotencyKey: "c"}
	if got := as[*CountResult](t, h.mustOK(redriveOp(cancel))); got.Count != 5 {
		t.Fatalf("cancel answered %d, want the 5 it moved", got.Count)
	}
	if len(h.jobs("q")) != 0 {
		t.Fatal("the job is still listed")
	}
	h.now += 10_000
	if got := as[*CountResult](t, h.mustOK(stepOp(ref))); got.Count != 0 {
		t.Fatalf("a cancelled job moved %d", got.Count)
	}
	if got := as[*CountResult](t, h.mustOK(redriveOp(cancel))); got.Count != 5 {
		t.Fatalf("retried cancel answered %d, want 5 as the first", got.Count)
	}
	if err := h.apply(redriveOp(&fsmv1.Redrive{Queue: "q", CancelJob: res.Job})).Failure(); !errors.Is(err, ErrMessageNotFound) {
		t.Fatalf("cancel of a finished job without a key: %v, want not found", err)
	}
	if qi := h.info("q"); qi.Stats.Ready != 5 || qi.Stats.DeadLettered != 15 {
		t.Fatalf("after the cancel: %+v", qi.Stats)
	}
}

// Before RedriveCancelVersion an entry ignores cancel_job, as older
// builds do: it is an ordinary redrive of everything (so the edge
// refuses the field until the cluster reaches the version).
func TestCancelIgnoredBeforeItsVersion(t *testing.T) {
	h := newHarness(t)
	h.raise(state.RedriveCancelVersion - 1)
	jobScenario(h, 4)
	res := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", RateMilli: 1000})))
	if got := as[*CountResult](t, h.mustOK(redriveOp(&fsmv1.Redrive{Queue: "q", CancelJob: res.Job}))); got.Count != 4 {
		t.Fatalf("a version-%d cancel moved %d, want all 4 as an ordinary redrive", state.RedriveCancelVersion-1, got.Count)
	}
}
