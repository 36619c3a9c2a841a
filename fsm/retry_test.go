package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

func retryPolicy() *fsmv1.RetryPolicy {
	return &fsmv1.RetryPolicy{InitialDelayMs: 500, MaxDelayMs: 4000, Multiplier: 2, Jitter: 0.5}
}

// waitsExactly checks that q's message is delayed for exactly ms from now:
// still delayed at ms-1, ready at ms.
func (h *harness) waitsExactly(q string, ms int64) {
	h.t.Helper()
	st := h.info(q).Stats
	if ms == 0 {
		if st.Ready != 1 || st.Delayed != 0 {
			h.t.Fatalf("%s: %+v, want ready at once", q, st)
		}
		return
	}
	if st.Delayed != 1 || st.Ready != 0 {
		h.t.Fatalf("%s: %+v, want delayed", q, st)
	}
	start := h.now
	h.now = start + ms - 1
	h.tick()
	if st := h.info(q).Stats; st.Ready != 0 {
		h.t.Fatalf("%s: ready %d ms after, before its delay of %d", q, ms-1, ms)
	}
	h.now = start + ms
	h.tick()
	if st := h.info(q).Stats; st.Ready != 1 || st.Delayed != 0 {
		h.t.Fatalf("%s: %+v at %d ms, want ready", q, st, ms)
	}
}

func nackOne(n *fsmv1.NackOne) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{n}}}}
}

func expireCmd(refs []*fsmv1.Ref, delays ...int64) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: refs, RetryDelaysMs: delays}}}
}

// TestRetryDelaysAreTheEntrys: from RetryVersion a counted nack without
// its own delay and an expiry wait exactly the delay the entry carries
// (the leader's computation; the state does none), a nack's own delay_ms
// overrides it, an unprocessed nack and a consumer's release are never
// delayed, a nack or expiry reaching max_deliveries dead-letters at once,
// and a redrive starts the attempts (so the backoff) afresh.
func TestRetryDelaysAreTheEntrys(t *testing.T) {
	h := newHarness(t)
	h.raise(RetryVersion)
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 5, Retry: retryPolicy()})
	id := h.enqueuePayloads("q", "m")[0]

	d := h.grant("q", "c1", 1000, id)[0]
	h.mustOK(nackOne(&fsmv1.NackOne{Ref: ref(d), RetryDelayMs: 731}))
	h.waitsExactly("q", 731)

	d = h.grant("q", "c1", 1000, id)[0]
	h.mustOK(nackOne(&fsmv1.NackOne{Ref: ref(d), DelayMs: 250, RetryDelayMs: 5000}))
	h.waitsExactly("q", 250) // the nack's own delay wins

	d = h.grant("q", "c1", 1000, id)[0]
	h.now += 1000
	h.mustOK(expireCmd([]*fsmv1.Ref{ref(d)}, 1900))
	h.waitsExactly("q", 1900)
	if st := h.info("q").Stats; st.ExpiredTotal != 1 {
		t.Fatalf("expired_total %d", st.ExpiredTotal)
	}

	// Unprocessed: never delayed by the policy, and not counted.
	d = h.grant("q", "c1", 1000, id)[0]
	h.mustOK(nackOne(&fsmv1.NackOne{Ref: ref(d), Uncounted: true, RetryDelayMs: 3000}))
	h.waitsExactly("q", 0)
	// A consumer's release: never delayed.
	d = h.grant("q", "c1", 1000, id)[0]
	if d.Attempt != 4 {
		t.Fatalf("attempt %d, want 4", d.Attempt)
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_ReleaseConsumer{ReleaseConsumer: &fsmv1.ReleaseConsumer{ConsumerId: "c1"}}})
	h.waitsExactly("q", 0)

	// A consumer's release counts the attempt (as before): the fifth is
	// max_deliveries, and its nack dead-letters at once,
	// whatever delay the entry carries.
	d = h.grant("q", "c1", 1000, id)[0]
	h.mustOK(nackOne(&fsmv1.NackOne{Ref: ref(d), RetryDelayMs: 4000}))
	if st := h.info("q").Stats; st.DeadLettered != 1 || st.Delayed != 0 {
		t.Fatalf("after the last attempt: %+v, want dead-lettered", st)
	}
	if n := as[*CountResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: "q"}}})).Count; n != 1 {
		t.Fatalf("redrive moved %d", n)
	}
	h.waitsExactly("q", 0)
	if d = h.grant("q", "c1", 1000, id)[0]; d.Attempt != 1 {
		t.Fatalf("attempt %d after a redrive, want 1 (the backoff starts again)", d.Attempt)
	}
	// An expiry that reaches max_deliveries dead-letters at once too.
	for range 4 {
		h.mustOK(nackOne(&fsmv1.NackOne{Ref: ref(d)}))
		d = h.grant("q", "c1", 1000, id)[0]
	}
	h.now += 1000
	h.mustOK(expireCmd([]*fsmv1.Ref{ref(d)}, 4000))
	if st := h.info("q").Stats; st.DeadLettered != 1 || st.Delayed != 0 {
		t.Fatalf("after the last attempt expired: %+v, want dead-lettered", st)
	}
}

// TestRetryDelaysRefusedOutOfRange: a delay outside [0, the longest
// duration] or more delays than refs is refused and changes nothing.
func TestRetryDelaysRefusedOutOfRange(t *testing.T) {
	h := newHarness(t)
	h.raise(RetryVersion)
	h.create("q", &fsmv1.QueueConfig{Retry: retryPolicy()})
	d := h.grant("q", "c1", 1000, h.enqueuePayloads("q", "m")...)[0]
	before := h.info("q").Stats
	for _, bad := range []int64{-1, MaxDurationMs + 1} {
		res := as[*ItemsResult](t, h.apply(nackOne(&fsmv1.NackOne{Ref: ref(d), RetryDelayMs: bad})))
		if !errors.Is(res.Items[0], ErrInvalid) {
			t.Fatalf("nack retry_delay_ms %d: %v, want invalid", bad, res.Items[0])
		}
	}
	if st := h.info("q").Stats; st != before {
		t.Fatalf("a refused nack changed the queue: %+v, was %+v", st, before)
	}
	h.now += 1000
	res := as[*ItemsResult](t, h.apply(expireCmd([]*fsmv1.Ref{ref(d)}, -5)))
	if !errors.Is(res.Items[0], ErrInvalid) {
		t.Fatalf("expire retry_delays_ms -5: %v", res.Items[0])
	}
	if err := h.apply(expireCmd([]*fsmv1.Ref{ref(d)}, 1, 2)).Failure(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("two delays for one ref: %v", err)
	}
	if st := h.info("q").Stats; st.InFlight != 1 {
		t.Fatalf("%+v, want the lease untouched", st)
	}
}

// TestRetryPolicyValidation: a policy outside its ranges is refused
// (INVALID_ARGUMENT) by create and update, changing nothing; the mask
// path "retry" replaces the whole policy and clears it when absent;
// other paths leave it.
func TestRetryPolicyValidation(t *testing.T) {
	h := newHarness(t)
	h.raise(RetryVersion)
	h.create("q", &fsmv1.QueueConfig{Retry: retryPolicy()})
	bad := []*fsmv1.RetryPolicy{
		{InitialDelayMs: -1, MaxDelayMs: 10, Multiplier: 1},
		{InitialDelayMs: 11, MaxDelayMs: 10, Multiplier: 1},
		{InitialDelayMs: 1, MaxDelayMs: MaxDurationMs + 1, Multiplier: 1},
		{InitialDelayMs: 1, MaxDelayMs: 10, Multiplier: 0.99},
		{InitialDelayMs: 1, MaxDelayMs: 10}, // multiplier 0
		{InitialDelayMs: 1, MaxDelayMs: 10, Multiplier: nan()},
		{InitialDelayMs: 1, MaxDelayMs: 10, Multiplier: inf()},
		{InitialDelayMs: 1, MaxDelayMs: 10, Multiplier: 2, Jitter: -0.01},
		{InitialDelayMs: 1, MaxDelayMs: 10, Multiplier: 2, Jitter: 1.01},
		{InitialDelayMs: 1, MaxDelayMs: 10, Multiplier: 2, Jitter: nan()},
	}
	queues := len(h.f.Reader().ListQueues(""))
	for i, p := range bad {
		err := h.apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: fmt.Sprint("b", i), Config: &fsmv1.QueueConfig{Retry: p}}}}).Failure()
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("create with %v: %v, want invalid", p, err)
		}
		err = h.apply(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{Retry: p}, Mask: []string{"retry"}}}}).Failure()
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("update with %v: %v, want invalid", p, err)
		}
	}
	if n := len(h.f.Reader().ListQueues("")); n != queues || !proto.Equal(h.info("q").Config.GetRetry(), retryPolicy()) {
		t.Fatalf("refused policies changed the state: %d queues, q's policy %v", n, h.info("q").Config.GetRetry())
	}
	for _, ok := range []*fsmv1.RetryPolicy{
		{InitialDelayMs: 0, MaxDelayMs: 0, Multiplier: 1},
		{InitialDelayMs: MaxDurationMs, MaxDelayMs: MaxDurationMs, Multiplier: 1e9, Jitter: 1},
	} {
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{Retry: ok}, Mask: []string{"retry"}}}})
		if got := h.info("q").Config.GetRetry(); !proto.Equal(got, ok) {
			t.Fatalf("policy %v, want %v", got, ok)
		}
	}
	// Another path leaves the policy; "retry" replaces all of it.
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{MaxDeliveries: 3}, Mask: []string{"max_deliveries"}}}})
	if h.info("q").Config.GetRetry() == nil {
		t.Fatal("updating max_deliveries dropped the policy")
	}
	only := &fsmv1.RetryPolicy{InitialDelayMs: 7, MaxDelayMs: 9, Multiplier: 1}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{Retry: only}, Mask: []string{"config.retry"}}}})
	if got := h.info("q").Config.GetRetry(); !proto.Equal(got, only) {
		t.Fatalf("policy %v, want exactly %v", got, only)
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{}, Mask: []string{"retry"}}}})
	if got := h.info("q").Config.GetRetry(); got != nil {
		t.Fatalf("policy %v after clearing it", got)
	}
}

// TestRetryPolicyTravels: the policy is part of the queue's config in the
// snapshot: a restored replica has it, with the same digest, and the
// digest differs from the same state without it.
func TestRetryPolicyTravels(t *testing.T) {
	build := func(p *fsmv1.RetryPolicy) *harness {
		h := newHarness(t)
		h.raise(RetryVersion)
		h.create("q", &fsmv1.QueueConfig{Retry: p})
		h.enqueuePayloads("q", "m")
		return h
	}
	with, without := build(retryPolicy()), build(nil)
	if digestOf(t, with.f) == digestOf(t, without.f) {
		t.Fatal("the digest does not cover the retry policy")
	}
	restored := New(Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, with.f)))); err != nil {
		t.Fatal(err)
	}
	qi, err := restored.Reader().GetQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(qi.Config.GetRetry(), retryPolicy()) {
		t.Fatalf("restored policy %v", qi.Config.GetRetry())
	}
	if digestOf(t, restored) != digestOf(t, with.f) {
		t.Fatal("restored digest differs")
	}
	// The restored replica answers the leader's question as the live one.
	var live, back [3]any
	ask := func(f *FSM, out *[3]any) {
		f.Reader().Read(func(v View) {
			p, _, md, ok := v.RetryInput(&fsmv1.Ref{Queue: "q", MessageId: 1})
			out[0], out[1], out[2] = p != nil, md, ok
		})
	}
	ask(with.f, &live)
	ask(restored, &back)
	if live != back {
		t.Fatalf("RetryInput live %v, restored %v", live, back)
	}
}

// TestRetryInput: the leader's read gives the policy, the attempts of the
// lease the ref names and max_deliveries; nothing for a wrong token, a
// queue without a policy or a message not leased.
func TestRetryInput(t *testing.T) {
	h := newHarness(t)
	h.raise(RetryVersion)
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 5, Retry: retryPolicy()})
	h.create("plain", nil)
	id := h.enqueuePayloads("q", "m")[0]
	pid := h.enqueuePayloads("plain", "m")[0]
	h.nack(h.grant("q", "c", 1000, id)[0], 0, false)
	d := h.grant("q", "c", 1000, id)[0]
	pd := h.grant("plain", "c", 1000, pid)[0]
	h.f.Reader().Read(func(v View) {
		p, attempts, md, ok := v.RetryInput(ref(d))
		if !ok || !proto.Equal(p, retryPolicy()) || attempts != 2 || md != 5 {
			t.Fatalf("RetryInput: %v %d %d %v", p, attempts, md, ok)
		}
		wrong := ref(d)
		wrong.LeaseToken++
		if _, _, _, ok := v.RetryInput(wrong); ok {
			t.Fatal("a wrong token answered")
		}
		if _, _, _, ok := v.RetryInput(ref(pd)); ok {
			t.Fatal("a queue without a policy answered")
		}
	})
	if RetryVersion != state.RetryVersion || RetryVersion > MaxLogVersion {
		t.Fatal("RetryVersion")
	}
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }
