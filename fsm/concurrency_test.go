package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// ck is a message of concurrency key key with payload p.
func ck(key, p string) *fsmv1.EnqueueMessage {
	return &fsmv1.EnqueueMessage{Payload: []byte(p), ConcurrencyKey: key}
}

// concGrant proposes one LeaseGrant of ids to consumer c1 and returns
// each item's error.
func (h *harness) concGrant(q string, ids ...uint64) ([]error, []*state.Delivery) {
	h.t.Helper()
	var gs []*fsmv1.Grant
	for i, id := range ids {
		gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: id, ConsumerId: "c1", DeadlineMs: h.now + 10_000, LeaseToken: (h.index+1)<<8 | uint64(i+1)})
	}
	r := as[*GrantResult](h.t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: gs}}}))
	return r.Items, r.Deliveries
}

// TestConcurrencyCapRefusesGrant: the FSM refuses, item by item, a grant
// that would put more messages of a key in flight than its cap, within
// one entry too; other keys, the empty key and a key whose override is 0
// are not held; an ack frees room.
func TestConcurrencyCapRefusesGrant(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", &fsmv1.QueueConfig{ConcurrencyLimit: 2, ConcurrencyLimits: map[string]int32{"free": 0, "one": 1}})
	a := h.enqueue("q", ck("a", "a1"), ck("a", "a2"), ck("a", "a3"))
	b := h.enqueue("q", ck("b", "b1"), ck("b", "b2"))
	e := h.enqueue("q", ck("", "e1"), ck("", "e2"), ck("", "e3"))
	f := h.enqueue("q", ck("free", "f1"), ck("free", "f2"), ck("free", "f3"))

	items, ds := h.concGrant("q", a[0], a[1], a[2], b[0], b[1], e[0], e[1], e[2], f[0], f[1], f[2])
	for i, err := range items {
		if i == 2 {
			if !errors.Is(err, state.ErrLimit) || !strings.Contains(err.Error(), `"a" has 2 in flight, its cap is 2`) {
				t.Fatalf("third grant of key a: %v, want refused at its cap", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
	}
	if st := h.info("q").Stats; st.InFlight != 10 || st.Ready != 1 {
		t.Fatalf("stats %+v", st)
	}
	h.ack(ds[0])
	if items, _ := h.concGrant("q", a[2]); items[0] != nil {
		t.Fatalf("grant after an ack freed room: %v", items[0])
	}
}

// TestConcurrencyCapOneIsFIFO: under a cap of 1 the FSM grants only the
// key's next message (priority, then enqueue order) and only while none
// of the key is in flight; a nacked message is next again, and a delayed
// (backing-off) head holds its key until it is due.
func TestConcurrencyCapOneIsFIFO(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", &fsmv1.QueueConfig{ConcurrencyLimit: 1})
	ids := h.enqueue("q", ck("k", "1"), ck("k", "2"), ck("k", "3"))
	refused := func(id uint64, why string) {
		t.Helper()
		if items, _ := h.concGrant("q", id); !errors.Is(items[0], state.ErrLimit) {
			t.Fatalf("%s: grant of %d: %v, want refused", why, id, items[0])
		}
	}
	refused(ids[1], "not the head")
	items, ds := h.concGrant("q", ids[0], ids[1])
	if items[0] != nil || !errors.Is(items[1], state.ErrLimit) {
		t.Fatalf("head and next in one entry: %v", items)
	}
	refused(ids[1], "head in flight")
	h.nack(ds[0], 0, false)
	refused(ids[1], "nacked head is next again")
	_, ds = h.concGrant("q", ids[0])
	h.nack(ds[0], 500, false) // backs off
	refused(ids[1], "head backing off")
	h.now += 600
	h.tick()
	refused(ids[1], "head due again")
	_, ds = h.concGrant("q", ids[0])
	if ds[0] == nil || ds[0].Attempt != 3 {
		t.Fatalf("head regranted: %+v", ds[0])
	}
	h.ack(ds[0])
	if items, _ := h.concGrant("q", ids[1]); items[0] != nil {
		t.Fatalf("next after the head settled: %v", items[0])
	}
	// A higher priority message of the key is next once the key is free.
	hi := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("hi"), ConcurrencyKey: "k", Priority: 5})
	h.ack(h.leased(t, "q", ids[1]))
	refused(ids[2], "a higher priority message comes first")
	if items, _ := h.concGrant("q", hi[0]); items[0] != nil {
		t.Fatalf("high priority head: %v", items[0])
	}
}

// leased is the delivery (ref) of a leased message, looked up in the state.
func (h *harness) leased(t *testing.T, q string, id uint64) *state.Delivery {
	t.Helper()
	var d *state.Delivery
	h.f.Reader().Read(func(v View) {
		c, tok, ok := v.Lease(q, id)
		if !ok {
			t.Fatalf("message %d not leased", id)
		}
		_ = c
		d = &state.Delivery{ID: id, Queue: q, LeaseToken: tok}
	})
	return d
}

// TestConcurrencyCarriedGrantsCapped: grants an Ack carries are held to
// the cap as a LeaseGrant's, counted after the entry's acks.
func TestConcurrencyCarriedGrantsCapped(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", &fsmv1.QueueConfig{ConcurrencyLimit: 1})
	ids := h.enqueue("q", ck("k", "1"), ck("k", "2"), ck("k", "3"), ck("j", "j1"))
	_, ds := h.concGrant("q", ids[0])
	g := func(id, tok uint64) *fsmv1.Grant {
		return &fsmv1.Grant{Queue: "q", MessageId: id, ConsumerId: "c1", DeadlineMs: h.now + 1000, LeaseToken: tok}
	}
	ag := as[*AckGrantResult](t, h.apply(ackWithGrants([]*fsmv1.Ref{ref(ds[0])}, g(ids[1], 91), g(ids[2], 92), g(ids[3], 93))))
	if ag.Granted.Items[0] != nil || !errors.Is(ag.Granted.Items[1], state.ErrLimit) || ag.Granted.Items[2] != nil {
		t.Fatalf("carried grants: %v, want the next of k, k's third refused, j granted", ag.Granted.Items)
	}
}

// TestConcurrencyLoweredCapRevokesNothing: lowering a cap below what is
// in flight takes no lease back; the key is held until it is under the
// new cap, and raising it lets more through at once.
func TestConcurrencyLoweredCapRevokesNothing(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", &fsmv1.QueueConfig{ConcurrencyLimit: 3})
	ids := h.enqueue("q", ck("k", "1"), ck("k", "2"), ck("k", "3"), ck("k", "4"), ck("k", "5"))
	_, ds := h.concGrant("q", ids[0], ids[1], ids[2])
	update := func(cfg *fsmv1.QueueConfig, mask ...string) {
		t.Helper()
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: cfg, Mask: mask}}})
	}
	update(&fsmv1.QueueConfig{ConcurrencyLimits: map[string]int32{"k": 1}}, "concurrency_limits")
	if st := h.info("q").Stats; st.InFlight != 3 {
		t.Fatalf("in flight %d after lowering the cap, want 3", st.InFlight)
	}
	h.ack(ds[0], ds[1])
	if items, _ := h.concGrant("q", ids[3]); !errors.Is(items[0], state.ErrLimit) {
		t.Fatalf("grant with 1 in flight under cap 1: %v", items[0])
	}
	update(&fsmv1.QueueConfig{ConcurrencyLimit: 5}, "concurrency_limit") // the override still holds k to 1
	if items, _ := h.concGrant("q", ids[3]); !errors.Is(items[0], state.ErrLimit) {
		t.Fatalf("override ignored: %v", items[0])
	}
	update(&fsmv1.QueueConfig{}, "concurrency_limits")
	if items, _ := h.concGrant("q", ids[3], ids[4]); items[0] != nil || items[1] != nil {
		t.Fatalf("after the override went (cap 5): %v", items)
	}
	if cfg := h.info("q").Config; cfg.ConcurrencyLimit != 5 || len(cfg.ConcurrencyLimits) != 0 {
		t.Fatalf("config %v", cfg)
	}
}

// TestConcurrencyValidation: bad caps and keys are refused as invalid
// and change nothing.
func TestConcurrencyValidation(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", nil)
	many := map[string]int32{}
	for i := range state.MaxConcurrencyLimits + 1 {
		many[fmt.Sprint("k", i)] = 1
	}
	for name, cfg := range map[string]*fsmv1.QueueConfig{
		"negative default":  {ConcurrencyLimit: -1},
		"negative override": {ConcurrencyLimits: map[string]int32{"a": -2}},
		"too many":          {ConcurrencyLimits: many},
		"long key":          {ConcurrencyLimits: map[string]int32{strings.Repeat("x", 256): 1}},
		"empty key":         {ConcurrencyLimits: map[string]int32{"": 1}},
	} {
		before := h.info("q").Config
		for _, cmd := range []*fsmv1.Command{
			{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "n", Config: cfg}}},
			{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: cfg}}},
		} {
			if err := h.apply(cmd).Failure(); !errors.Is(err, state.ErrInvalid) {
				t.Fatalf("%s: %T: %v, want invalid", name, cmd.Op, err)
			}
		}
		if after := h.info("q").Config; !proto.Equal(after, before) {
			t.Fatalf("%s: a refused config changed the queue: %v", name, after)
		}
		if _, err := h.f.Reader().GetQueue("n"); !errors.Is(err, state.ErrQueueNotFound) {
			t.Fatalf("%s: refused create: %v", name, err)
		}
	}
	res := as[*EnqueueResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: []*fsmv1.EnqueueMessage{ck(strings.Repeat("x", 256), "p")}}}}}}))
	if !errors.Is(res.Batches[0].Err, state.ErrInvalid) || !strings.Contains(res.Batches[0].Err.Error(), "concurrency_key") {
		t.Fatalf("long concurrency_key: %v", res.Batches[0].Err)
	}
}

// TestConcurrencyKeyCounts: the key counts in a message's cost.
func TestConcurrencyKeyCounts(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", nil)
	h.enqueue("q", ck("", "p"))
	plain := h.info("q").Stats.Bytes
	h.enqueue("q", ck("tenant-a", "p"))
	if got := h.info("q").Stats.Bytes - plain; got != plain+int64(len("tenant-a")) {
		t.Fatalf("a keyed message costs %d, want %d", got, plain+int64(len("tenant-a")))
	}
	if c := state.MessageCost(ck("tenant-a", "p")); c != plain+8 {
		t.Fatalf("MessageCost %d", c)
	}
}

// concurrencyScenario runs entries carrying concurrency keys and caps, or
// (plain) the same entries without them.
func concurrencyScenario(h *harness, plain bool, step func(Result)) {
	key := func(k string) string {
		if plain {
			return ""
		}
		return k
	}
	cfg := &fsmv1.QueueConfig{ConcurrencyLimit: 1, ConcurrencyLimits: map[string]int32{"b": 2}}
	if plain {
		cfg = &fsmv1.QueueConfig{}
	}
	do := func(cmd *fsmv1.Command) Result { r := h.apply(cmd); step(r); return r }
	do(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q", Config: cfg}}})
	res := do(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: []*fsmv1.EnqueueMessage{
		ck(key("a"), "a1"), ck(key("a"), "a2"), ck(key("b"), "b1"), ck(key("b"), "b2"), ck(key("b"), "b3")}}}}}})
	ids := res.(*EnqueueResult).Batches[0].IDs
	var gs []*fsmv1.Grant
	for i, id := range ids {
		gs = append(gs, &fsmv1.Grant{Queue: "q", MessageId: id, ConsumerId: "c", DeadlineMs: h.now + 1000, LeaseToken: uint64(100 + i)})
	}
	do(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: gs}}})
	do(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{ConcurrencyLimit: 3}, Mask: []string{"concurrency_limit"}}}})
	do(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "q", Config: &fsmv1.QueueConfig{ConcurrencyLimit: 3}, Mask: []string{"max_depth"}}}})
}

// TestConcurrencyIgnoredBeforeItsVersion: entries of the version before
// ConcurrencyVersion that carry concurrency keys and caps apply exactly
// as the same entries without them (as an older build, which ignores the
// unknown fields, applies them), answers and digests alike, except that
// a mask naming the new paths is refused as an unknown field; from the
// version on, the caps hold.
func TestConcurrencyIgnoredBeforeItsVersion(t *testing.T) {
	run := func(v uint32, plain bool) []string {
		h := newHarness(t)
		h.raise(v)
		var got []string
		concurrencyScenario(h, plain, func(r Result) { got = append(got, digestOf(t, h.f)+" "+summary(r)) })
		return got
	}
	old, plain := run(ConcurrencyVersion-1, false), run(ConcurrencyVersion-1, true)
	for i := range old {
		if i == 3 {
			if !strings.Contains(old[i], "not a QueueConfig field") {
				t.Fatalf("mask concurrency_limit before the version: %s", old[i])
			}
			continue
		}
		if old[i] != plain[i] {
			t.Fatalf("entry %d differs from the same entry without concurrency fields:\n%s\n%s", i, old[i], plain[i])
		}
	}
	now := run(ConcurrencyVersion, false)
	if !strings.Contains(now[2], "limit reached") {
		t.Fatalf("grants at the version: %s, want caps held", now[2])
	}
}

// TestConcurrencySnapshotAndDigest: keys and caps survive a snapshot, the
// restored replica counts the leases granted before it (a new leader
// counts the old leader's), and the digest covers the key.
func TestConcurrencySnapshotAndDigest(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", &fsmv1.QueueConfig{ConcurrencyLimits: map[string]int32{"k": 1}})
	ids := h.enqueue("q", ck("k", "1"), ck("k", "2"))
	h.concGrant("q", ids[0])
	r := restoredCopy(t, h)
	if a, b := digestOf(t, h.f), digestOf(t, r.f); a != b {
		t.Fatalf("digest after restore %s, before %s", b, a)
	}
	if items, _ := r.concGrant("q", ids[1]); !errors.Is(items[0], state.ErrLimit) {
		t.Fatalf("restored replica granted past the cap: %v", items[0])
	}
	if cfg := r.info("q").Config; cfg.ConcurrencyLimits["k"] != 1 {
		t.Fatalf("restored config %v", cfg)
	}
	// The same history with another key digests differently.
	o := newHarness(t)
	o.raise(ConcurrencyVersion)
	o.create("q", &fsmv1.QueueConfig{ConcurrencyLimits: map[string]int32{"k": 1}})
	o.enqueue("q", ck("j", "1"), ck("k", "2"))
	o.concGrant("q", ids[0])
	if digestOf(t, o.f) == digestOf(t, h.f) {
		t.Fatal("the digest does not cover the concurrency key")
	}
}

// TestPausedAndCappedKeysLeaveTheRing: NextKey walks a fairness key only
// when it has a message its caps let through and it is not paused;
// pausing or resuming a key moves it out of and into the ring whatever
// its caps do meanwhile (Verify checks the rings after every command),
// and a paused key's grant is refused even with room under its cap.
func TestPausedAndCappedKeysLeaveTheRing(t *testing.T) {
	h := newHarness(t)
	h.raise(ConcurrencyVersion)
	h.create("q", &fsmv1.QueueConfig{ConcurrencyLimit: 1})
	fc := func(p, fk, c string) *fsmv1.EnqueueMessage {
		return &fsmv1.EnqueueMessage{Payload: []byte(p), FairnessKey: fk, ConcurrencyKey: c}
	}
	a := h.enqueue("q", fc("a1", "a", "x"), fc("a2", "a", "x"))
	b := h.enqueue("q", fc("b1", "b", "y"))
	h.enqueue("q", fc("c1", "c", ""))
	ring := func() []string {
		var keys []string
		h.f.Reader().Read(func(v View) {
			qv, _ := v.Queue("q")
			for k, ok := qv.NextKey(0, 0); ok; k, ok = qv.NextKey(0, k.Seq) {
				keys = append(keys, k.Key)
			}
		})
		return keys
	}
	want := func(step string, keys ...string) {
		t.Helper()
		if got := ring(); !slices.Equal(got, keys) {
			t.Fatalf("%s: ring %v, want %v", step, got, keys)
		}
	}
	want("start", "a", "b", "c")
	h.mustOK(pauseCmd("q", "b", 0))
	want("b paused", "a", "c")
	if items, _ := h.concGrant("q", b[0]); !errors.Is(items[0], ErrPaused) {
		t.Fatalf("grant of a paused key with room under its cap: %v, want ErrPaused", items[0])
	}
	_, ds := h.concGrant("q", a[0])
	want("a at its cap", "c")
	h.mustOK(pauseCmd("q", "a", 0))
	h.mustOK(resumeCmd("q", "b"))
	want("a paused at its cap, b resumed", "b", "c")
	h.ack(ds...)
	want("a has room but is paused", "b", "c")
	if items, _ := h.concGrant("q", a[1]); !errors.Is(items[0], ErrPaused) {
		t.Fatalf("grant of a paused key: %v, want ErrPaused", items[0])
	}
	h.mustOK(resumeCmd("q", "a"))
	want("a resumed with room", "a", "b", "c")
}
