package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func createCmd(name, dlq string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: &fsmv1.QueueConfig{DeadLetterQueue: dlq}}}}
}

// TestConvertingAQueueInUse: from log version 12 an existing ordinary
// queue is turned into another queue's dead-letter queue only when it was
// named on purpose, holds no message (ready, delayed, leased) and has none
// dead-lettered, and its own dead-letter queue is the empty automatic one;
// otherwise the create fails with ErrInUse naming it and nothing changes.
// Version-10 entries convert as they did. An existing dead-letter queue is
// shared at both versions.
func TestConvertingAQueueInUse(t *testing.T) {
	type setup func(h *harness)
	holds := func(h *harness) { h.enqueuePayloads("b.jobs", "work") }
	leased := func(h *harness) { h.grant("b.jobs", "c1", 1000, h.enqueuePayloads("b.jobs", "work")...) }
	delayed := func(h *harness) { h.enqueue("b.jobs", &fsmv1.EnqueueMessage{Payload: []byte("later"), DelayMs: 5000}) }
	deadLettered := func(h *harness) {
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "b.jobs", Config: &fsmv1.QueueConfig{MaxDeliveries: 1}, Mask: []string{"max_deliveries"}}}})
		d := h.grant("b.jobs", "c1", 1000, h.enqueuePayloads("b.jobs", "poison")...)[0]
		h.nack(d, 0, false)
	}
	empty := func(*harness) {}
	for _, c := range []struct {
		name     string
		target   string // the existing ordinary queue
		setup    setup
		dlq      string // what the new queue names ("" = default)
		newName  string
		refused  bool   // at version 12
		v10Error string // what version 11 answered ("" = converted)
	}{
		{"holds a message", "b.jobs", holds, "b.jobs", "a.x", true, ""},
		{"holds a leased message", "b.jobs", leased, "b.jobs", "a.x", true, ""},
		{"holds a delayed message", "b.jobs", delayed, "b.jobs", "a.x", true, ""},
		{"has messages dead-lettered", "b.jobs", deadLettered, "b.jobs", "a.x", true, "own dead-letter queue is in use"},
		{"empty, named", "b.jobs", empty, "b.jobs", "a.x", false, ""},
		{"empty, by its default name", "a.x.dlq", empty, "", "a.x", true, ""},
	} {
		for _, v := range []uint32{GuardVersion - 1, GuardVersion} {
			t.Run(fmt.Sprintf("%s/version%d", c.name, v), func(t *testing.T) {
				mk := func() *harness {
					h := newHarness(t)
					h.raise(v)
					h.create(c.target, nil)
					c.setup(h)
					return h
				}
				h, noop := mk(), mk()
				res := h.apply(createCmd(c.newName, c.dlq))
				noop.tick()
				err := res.Failure()
				switch {
				case v >= GuardVersion && c.refused:
					if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), c.target) {
						t.Fatalf("%v, want ErrInUse naming %s", err, c.target)
					}
					if !bytes.Equal(snapshotBytes(t, h.f), snapshotBytes(t, noop.f)) {
						t.Fatal("a refused create changed the state")
					}
					return
				case v < GuardVersion && c.v10Error != "":
					if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.v10Error) {
						t.Fatalf("older version: %v, want %q", err, c.v10Error)
					}
					return
				case err != nil:
					t.Fatalf("refused: %v", err)
				}
				if !h.info(c.target).IsDeadLetterQueue {
					t.Fatalf("%s was not made a dead-letter queue", c.target)
				}
				if _, err := h.f.Reader().GetQueue(c.target + ".dlq"); !errors.Is(err, ErrQueueNotFound) {
					t.Fatalf("%s's own empty automatic dead-letter queue is still there: %v", c.target, err)
				}
			})
		}
	}
	t.Run("sharing a dead-letter queue", func(t *testing.T) {
		h := newHarness(t)
		h.raise(GuardVersion)
		h.create("a.x", &fsmv1.QueueConfig{DeadLetterQueue: "a.dlq"})
		h.enqueuePayloads("a.dlq", "parked")
		h.mustOK(createCmd("a.y", "a.dlq"))
		if cfg := h.info("a.y").Config; cfg.GetDeadLetterQueue() != "a.dlq" {
			t.Fatalf("a.y's dead-letter queue: %q", cfg.GetDeadLetterQueue())
		}
	})
	t.Run("left behind by its origin", func(t *testing.T) {
		// A converted queue stays a dead-letter queue, with its
		// messages, when the last queue naming it is deleted; its owner
		// may delete it then, or share it again.
		h := newHarness(t)
		h.raise(GuardVersion)
		h.create("e", nil)
		h.create("f", &fsmv1.QueueConfig{DeadLetterQueue: "e", MaxDeliveries: 1})
		h.nack(h.grant("f", "c1", 1000, h.enqueuePayloads("f", "poison")...)[0], 0, false)
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "f"}}})
		e := h.info("e")
		if !e.IsDeadLetterQueue || e.Stats.Ready != 1 {
			t.Fatalf("e after its origin was deleted: %+v", e)
		}
		ds, _ := h.f.Reader().Peek("e", 10, false)
		if len(ds) != 1 || ds[0].OriginQueue != "" || ds[0].DeadLetterReason != "max_deliveries" {
			t.Fatalf("e's message: %+v", ds)
		}
		h.mustOK(createCmd("g", "e"))
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "g"}}})
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "e"}}})
	})
}

// TestMaxQueues: from log version 12 the cluster setting max_queues
// (10,000 from the raise, dead-letter queues counted) refuses a create
// that would pass it with ErrLimit, changing nothing; it travels in
// snapshots and the digest; a version-10 entry ignores the field.
func TestMaxQueues(t *testing.T) {
	setCmd := func(n int64) *fsmv1.Command {
		return &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueues: &n}}}
	}
	old := newHarness(t)
	old.raise(GuardVersion - 1)
	old.mustOK(setCmd(1))
	old.create("q1", nil)
	old.create("q2", nil)
	if _, s := old.f.Reader().Held(); s.MaxQueues != 0 {
		t.Fatalf("older version: max_queues %d, want none", s.MaxQueues)
	}

	h := newHarness(t)
	h.raise(GuardVersion)
	if _, s := h.f.Reader().Held(); s.MaxQueues != DefaultMaxQueues {
		t.Fatalf("after the raise: max_queues %d, want %d", s.MaxQueues, DefaultMaxQueues)
	}
	if res := h.apply(setCmd(-1)); !errors.Is(res.Failure(), ErrInvalid) {
		t.Fatalf("negative max_queues: %v", res.Failure())
	}
	h.mustOK(setCmd(5))
	h.create("q1", nil) // q1, q1.dlq
	h.create("q2", nil) // q2, q2.dlq
	twin := New(Options{})
	if err := twin.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	res := h.apply(createCmd("q3", "")) // q3 and q3.dlq: 6 > 5
	if err := res.Failure(); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "max_queues 5") {
		t.Fatalf("past max_queues: %v, want ErrLimit naming it", err)
	}
	names := func(f *FSM) (out []string) {
		for _, q := range f.Reader().ListQueues("") {
			out = append(out, q.Name)
		}
		return out
	}
	if a, b := names(h.f), names(twin); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("a refused create changed the queues: %v, was %v", a, b)
	}
	h.mustOK(createCmd("q3", "q1.dlq")) // shares a DLQ: one more, 5
	if res := h.apply(createCmd("q4", "q1.dlq")); !errors.Is(res.Failure(), ErrLimit) {
		t.Fatalf("the sixth queue: %v", res.Failure())
	}
	restored := New(Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if _, s := restored.Reader().Held(); s.MaxQueues != 5 {
		t.Fatalf("restored max_queues %d", s.MaxQueues)
	}
	if digestOf(t, restored) != digestOf(t, h.f) {
		t.Fatal("restored digest differs")
	}
	h.mustOK(setCmd(0)) // unlimited
	h.create("q4", nil)
	h.mustOK(setCmd(3)) // below the count: refuses new queues only
	if n := len(h.f.Reader().ListQueues("")); n != 7 {
		t.Fatalf("%d queues, want 7", n)
	}
	a, b := newHarness(t), newHarness(t)
	for _, x := range []*harness{a, b} {
		x.raise(GuardVersion)
	}
	b.mustOK(setCmd(7))
	if digestOf(t, a.f) == digestOf(t, b.f) {
		t.Fatal("max_queues is not in the digest")
	}
}

// TestUncountedNackKeepsItsDelay: from log version 12 a nack that hands a
// delivery back unprocessed with delay_ms makes the message wait that
// long (and still does not count the attempt); a version-10 entry drops
// the delay, as it did.
func TestUncountedNackKeepsItsDelay(t *testing.T) {
	for _, v := range []uint32{GuardVersion - 1, GuardVersion} {
		h := newHarness(t)
		h.raise(v)
		h.create("q", nil)
		d := h.grant("q", "c1", 1000, h.enqueuePayloads("q", "m")...)[0]
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), Uncounted: true, DelayMs: 500}}}}})
		st := h.info("q").Stats
		if v < GuardVersion {
			if st.Ready != 1 || st.Delayed != 0 {
				t.Fatalf("older version: %+v, want ready at once", st)
			}
			continue
		}
		if st.Ready != 0 || st.Delayed != 1 {
			t.Fatalf("version 12: %+v, want delayed", st)
		}
		h.now += 499
		h.tick()
		if h.info("q").Stats.Ready != 0 {
			t.Fatal("ready before its delay")
		}
		h.now++
		h.tick()
		again := h.grant("q", "c2", 1000, d.ID)[0]
		if again.Attempt != 1 {
			t.Fatalf("attempt %d after an uncounted nack, want 1", again.Attempt)
		}
	}
}

// TestRedriveRestampsTTL: from log version 12 a redriven message gets its
// queue's message_ttl_ms afresh from the redrive, and when it passes the
// message is dead-lettered again with reason ttl; a queue without a TTL
// gives none. A version-10 redrive leaves the message without a TTL for
// good, as it did.
func TestRedriveRestampsTTL(t *testing.T) {
	for _, v := range []uint32{GuardVersion - 1, GuardVersion} {
		t.Run(fmt.Sprint("version", v), func(t *testing.T) {
			h := newHarness(t)
			h.raise(v)
			h.create("t", &fsmv1.QueueConfig{MessageTtlMs: 1000, MaxDeliveries: 1})
			h.create("n", &fsmv1.QueueConfig{MaxDeliveries: 1})
			for _, q := range []string{"t", "n"} {
				h.nack(h.grant(q, "c1", 1000, h.enqueuePayloads(q, "m")...)[0], 0, false)
			}
			h.now += 5000
			for _, q := range []string{"t", "n"} {
				if n := as[*CountResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: q}}})).Count; n != 1 {
					t.Fatalf("redrive %s moved %d", q, n)
				}
			}
			h.now += 999
			h.tick()
			if st := h.info("t").Stats; st.Ready != 1 || st.DeadLettered != 0 {
				t.Fatalf("before the TTL: %+v", st)
			}
			h.now++
			h.tick()
			st := h.info("t").Stats
			if v < GuardVersion {
				if st.Ready != 1 {
					t.Fatalf("older version: %+v, want the message kept without a TTL", st)
				}
				return
			}
			if st.Ready != 0 || st.DeadLettered != 1 {
				t.Fatalf("after the TTL: %+v, want dead-lettered", st)
			}
			ds, _ := h.f.Reader().Peek("t", 10, true)
			if len(ds) != 1 || ds[0].DeadLetterReason != "ttl" || ds[0].OriginQueue != "t" {
				t.Fatalf("dead letters: %+v", ds)
			}
			h.now += 1 << 30
			h.tick()
			if h.info("n").Stats.Ready != 1 {
				t.Fatal("a queue without a TTL expired a redriven message")
			}
		})
	}
}

// TestSettleAfterDeadlineBeforeExpire is the contract docs/api.md states:
// a lease is its holder's until a LeaseExpire entry ends it, so an Extend
// or Ack that commits after the deadline but before the expiry applies is
// accepted (nobody else can hold the message yet: it is granted again
// only once it is ready), and the expiry that follows an extend is
// refused; once the expiry has applied, the holder's token is stale.
func TestSettleAfterDeadlineBeforeExpire(t *testing.T) {
	h := newHarness(t)
	h.raise(GuardVersion)
	h.create("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
	ds := h.grant("q", "c1", 1000, h.enqueuePayloads("q", "a", "b", "c")...)
	h.now += 1500
	ext := as[*ExtendResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: []*fsmv1.Ref{ref(ds[0])}, ExtendByMs: 1000}}}))
	if ext.Deadlines[0] != h.now+1000 {
		t.Fatalf("extended to %d, want %d", ext.Deadlines[0], h.now+1000)
	}
	if it := h.ack(ds[1]).Items[0]; it != nil {
		t.Fatalf("ack after the deadline, before the expiry: %v", it)
	}
	exp := as[*ItemsResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(ds[0]), ref(ds[2])}}}}))
	if !errors.Is(exp.Items[0], ErrStaleLease) || exp.Items[1] != nil {
		t.Fatalf("expiry of the extended lease and of the lapsed one: %v", exp.Items)
	}
	if it := h.ack(ds[2]).Items[0]; !errors.Is(it, ErrStaleLease) {
		t.Fatalf("ack after the expiry applied: %v", it)
	}
	if st := h.info("q").Stats; st.AckedTotal != 1 || st.InFlight != 1 || st.Ready != 1 {
		t.Fatalf("stats %+v", st)
	}
}
