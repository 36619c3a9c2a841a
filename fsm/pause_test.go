package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func pauseCmd(q, key string, ms int64) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: q, FairnessKey: key, DurationMs: ms}}}
}

func resumeCmd(q, key string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_ResumeQueue{ResumeQueue: &fsmv1.ResumeQueue{Name: q, FairnessKey: key}}}
}

// grantItems proposes one grant per id (as a leader would, tokens drawn)
// and returns each item's error.
func (h *harness) grantItems(q string, ids ...uint64) []error {
	h.t.Helper()
	var gs []*fsmv1.Grant
	for i, id := range ids {
		gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: id, ConsumerId: "c", DeadlineMs: h.now + 1000, LeaseToken: (h.index+1)<<8 | uint64(i+1)})
	}
	return as[*GrantResult](h.t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: gs}}})).Items
}

func keyed(payload, key string) *fsmv1.EnqueueMessage {
	return &fsmv1.EnqueueMessage{Payload: []byte(payload), FairnessKey: key}
}

// TestPausedKeyIsNotGranted: a paused key's messages are refused at apply
// (ErrPaused), plain and carried grants alike, while other keys and the
// default key go on; enqueues are accepted; Peek still shows them; the
// resume lets them go.
func TestPausedKeyIsNotGranted(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion)
	h.create("q", nil)
	ids := h.enqueue("q", keyed("a1", "a"), keyed("b1", "b"), keyed("d1", ""), keyed("a2", "a"))
	h.mustOK(pauseCmd("q", "a", 0))
	qi := h.info("q")
	if qi.Paused || len(qi.PausedKeys) != 1 || qi.PausedKeys[0] != (state.PausedKey{Key: "a"}) {
		t.Fatalf("after pausing key a: paused %v keys %+v", qi.Paused, qi.PausedKeys)
	}
	more := h.enqueue("q", keyed("a3", "a"))
	items := h.grantItems("q", ids[0], ids[1], ids[2], more[0])
	if !errors.Is(items[0], ErrPaused) || items[1] != nil || items[2] != nil || !errors.Is(items[3], ErrPaused) {
		t.Fatalf("grant items %v: want a's refused (paused), b's and the default key's granted", items)
	}
	if got := h.readyIDs("q"); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
		t.Fatalf("Peek %v: a paused key's messages still wait, in order", got)
	}
	// An ack carrying a grant of the paused key: the ack applies, the
	// grant is refused.
	b := h.grant("q", "c", 1000, h.enqueue("q", keyed("b2", "b"))[0])[0]
	ag := as[*AckGrantResult](t, h.apply(ackWithGrants([]*fsmv1.Ref{ref(b)}, &fsmv1.Grant{Queue: "q", MessageId: ids[3], ConsumerId: "c", DeadlineMs: h.now + 1000, LeaseToken: 99})))
	if ag.Acked.Items[0] != nil || !errors.Is(ag.Granted.Items[0], ErrPaused) {
		t.Fatalf("ack with a carried grant of a paused key: acked %v granted %v", ag.Acked.Items, ag.Granted.Items)
	}
	h.mustOK(resumeCmd("q", "a"))
	h.mustOK(resumeCmd("q", "a")) // resuming what is not paused is OK
	if items := h.grantItems("q", ids[0]); items[0] != nil {
		t.Fatalf("grant after resume: %v", items[0])
	}
	if qi := h.info("q"); len(qi.PausedKeys) != 0 {
		t.Fatalf("paused keys after resume: %+v", qi.PausedKeys)
	}
}

// TestPausedQueueLetsTimePass: a whole-queue pause refuses every grant but
// accepts enqueues; leases already out are acked and expire as ever; a
// delay comes due and a lapsed lease returns to ready while paused. Only
// grants stop.
func TestPausedQueueLetsTimePass(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion)
	h.create("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
	ids := h.enqueue("q", keyed("x", ""), keyed("y", "k"), keyed("z", "k"))
	ds := h.grant("q", "c", 1000, ids[0], ids[1])
	h.mustOK(pauseCmd("q", "", 0))
	qi := h.info("q")
	if !qi.Paused || qi.PausedUntilMs != 0 || len(qi.PausedKeys) != 0 {
		t.Fatalf("whole-queue pause: %+v", qi)
	}
	later := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("later"), DelayMs: 500})
	if items := h.grantItems("q", ids[2]); !errors.Is(items[0], ErrPaused) {
		t.Fatalf("grant in a paused queue: %v", items[0])
	}
	if r := h.ack(ds[0]); r.Items[0] != nil {
		t.Fatalf("ack of a lease granted before the pause: %v", r.Items[0])
	}
	h.now += 1500
	h.tick()
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(ds[1])}}}})
	st := h.info("q").Stats
	if st.Ready != 3 || st.Delayed != 0 || st.InFlight != 0 || st.ExpiredTotal != 1 {
		t.Fatalf("stats while paused %+v: want the delay come due and the lapsed lease back", st)
	}
	if items := h.grantItems("q", later[0]); !errors.Is(items[0], ErrPaused) {
		t.Fatalf("grant of a message that came due while paused: %v", items[0])
	}
	h.mustOK(resumeCmd("q", ""))
	if items := h.grantItems("q", later[0], ids[1]); items[0] != nil || items[1] != nil {
		t.Fatalf("grants after resume: %v", items)
	}
}

// TestTimedPauseEndsOnTheStateClock: a pause with a duration holds until
// the state clock reaches its end, which NextDue reports so the leader
// ticks then; the sweep ends it; a new pause replaces the old one's end.
func TestTimedPauseEndsOnTheStateClock(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion)
	h.create("q", nil)
	ids := h.enqueue("q", keyed("a1", "a"), keyed("o1", ""))
	start := h.now
	h.mustOK(pauseCmd("q", "a", 1000))
	qi := h.info("q")
	if len(qi.PausedKeys) != 1 || qi.PausedKeys[0].UntilMs != start+1000 {
		t.Fatalf("paused keys %+v, want a until %d", qi.PausedKeys, start+1000)
	}
	h.mustOK(pauseCmd("q", "", 3000))
	qi = h.info("q")
	if !qi.Paused || qi.PausedUntilMs != start+3000 {
		t.Fatalf("queue pause %+v, want until %d", qi, start+3000)
	}
	due := func() int64 {
		var at int64
		h.f.Reader().Read(func(v View) { at, _ = v.NextDue() })
		return at
	}
	if got := due(); got != start+1000 {
		t.Fatalf("NextDue %d, want the key's pause end %d", got, start+1000)
	}
	h.now = start + 999
	h.tick()
	if items := h.grantItems("q", ids[0]); !errors.Is(items[0], ErrPaused) {
		t.Fatalf("a grant 1 ms before the end: %v", items[0])
	}
	h.now = start + 1000
	h.tick()
	qi = h.info("q")
	if len(qi.PausedKeys) != 0 || !qi.Paused {
		t.Fatalf("after the key pause's end: %+v", qi)
	}
	if got := due(); got != start+3000 {
		t.Fatalf("NextDue %d, want the queue pause's end %d", got, start+3000)
	}
	// A new pause replaces the old one's end (here: until resumed).
	h.mustOK(pauseCmd("q", "", 0))
	h.now = start + 5000
	h.tick()
	if !h.info("q").Paused {
		t.Fatal("the queue pause replaced by one without an end ended at the old end")
	}
	if _, ok := func() (int64, bool) {
		var at int64
		var ok bool
		h.f.Reader().Read(func(v View) { at, ok = v.NextDue() })
		return at, ok
	}(); ok {
		t.Fatal("NextDue reports an end for a pause until resumed")
	}
	h.mustOK(pauseCmd("q", "", 200))
	h.now += 200
	h.tick()
	if qi := h.info("q"); qi.Paused {
		t.Fatalf("a 200 ms pause still holds 200 ms later: %+v", qi)
	}
	if items := h.grantItems("q", ids[0], ids[1]); items[0] != nil || items[1] != nil {
		t.Fatalf("grants after every pause ended: %v", items)
	}
}

// TestExpiredPauseRefusesNothingBeforeTheSweep: a grant in the same entry
// that moves the clock past a pause's end is not refused (the rule reads
// the clock, not whether the sweep got there).
func TestExpiredPauseRefusesNothingBeforeTheSweep(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion)
	h.create("q", nil)
	ids := h.enqueue("q", keyed("a1", "a"))
	h.mustOK(pauseCmd("q", "", 100))
	h.now += 100
	if items := h.grantItems("q", ids[0]); items[0] != nil {
		t.Fatalf("grant at the pause's end: %v", items[0])
	}
}

// TestPauseValidation: bad input is refused and changes nothing; an unseen
// key may be paused and holds when its messages arrive; the keys paused
// per queue are bounded.
func TestPauseValidation(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion)
	h.create("q", nil)
	// twin applies an empty entry for each refused one: the same index and
	// clock, nothing else.
	twin := newHarness(t)
	twin.raise(PauseVersion)
	twin.create("q", nil)
	for _, tc := range []struct {
		cmd  *fsmv1.Command
		want error
	}{
		{pauseCmd("q", "", -1), ErrInvalid},
		{pauseCmd("q", "k", state.MaxDurationMs+1), ErrInvalid},
		{pauseCmd("q", strings.Repeat("k", 256), 0), ErrInvalid},
		{pauseCmd("nope", "", 0), ErrQueueNotFound},
		{resumeCmd("nope", ""), ErrQueueNotFound},
		{resumeCmd("q", strings.Repeat("k", 256)), ErrInvalid},
	} {
		if err := h.apply(tc.cmd).Failure(); !errors.Is(err, tc.want) {
			t.Errorf("%v: %v, want %v", tc.cmd.Op, err, tc.want)
		}
		twin.apply(&fsmv1.Command{})
	}
	if digestOf(t, h.f) != digestOf(t, twin.f) {
		t.Fatal("a refused pause changed the state")
	}
	h.mustOK(pauseCmd("q", "later", state.MaxDurationMs))
	ids := h.enqueue("q", keyed("l1", "later"))
	if items := h.grantItems("q", ids[0]); !errors.Is(items[0], ErrPaused) {
		t.Fatalf("a key paused before it was seen: %v", items[0])
	}
	for i := 1; i < MaxPausedKeys; i++ {
		h.mustOK(pauseCmd("q", fmt.Sprint("k", i), 0))
	}
	if err := h.apply(pauseCmd("q", "one-too-many", 0)).Failure(); !errors.Is(err, ErrLimit) {
		t.Fatalf("pause of key %d: %v, want ErrLimit", MaxPausedKeys+1, err)
	}
	// Replacing a paused key's end and the whole-queue pause are not new keys.
	h.mustOK(pauseCmd("q", "k1", 10))
	h.mustOK(pauseCmd("q", "", 0))
	if qi := h.info("q"); len(qi.PausedKeys) != MaxPausedKeys || !qi.Paused {
		t.Fatalf("%d keys paused, paused %v", len(qi.PausedKeys), qi.Paused)
	}
}

// TestPauseNeedsItsVersion: below PauseVersion the commands are unknown
// (as older builds read them) and change nothing: the grant goes through.
func TestPauseNeedsItsVersion(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion - 1)
	h.create("q", nil)
	ids := h.enqueue("q", keyed("a1", "a"))
	if err := h.apply(pauseCmd("q", "a", 0)).Failure(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("a version-%d PauseQueue: %v, want unknown command", PauseVersion-1, err)
	}
	if err := h.apply(resumeCmd("q", "a")).Failure(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a version-%d ResumeQueue: %v", PauseVersion-1, err)
	}
	if items := h.grantItems("q", ids[0]); items[0] != nil {
		t.Fatalf("grant: %v", items[0])
	}
}

// TestPauseEntriesOfOlderVersionsReplayAsBefore: a log of version-13
// entries that carries pause commands (a proposal that raced the raise)
// applies exactly as the same log with those entries empty, which is how a
// version-13 build decodes them: the same answers and digest after every
// entry, grants of the "paused" key included.
func TestPauseEntriesOfOlderVersionsReplayAsBefore(t *testing.T) {
	run := func(withPause bool) []string {
		h := newHarness(t)
		var out []string
		do := func(cmd *fsmv1.Command) {
			if !withPause {
				switch cmd.Op.(type) {
				case *fsmv1.Command_PauseQueue, *fsmv1.Command_ResumeQueue:
					cmd = &fsmv1.Command{}
				}
			}
			res := h.apply(cmd)
			out = append(out, fmt.Sprintf("%d %s %s", h.index, digestOf(t, h.f), summary(res)))
		}
		h.raise(PauseVersion - 1)
		h.create("q", nil)
		ids := h.enqueue("q", keyed("a1", "a"), keyed("b1", "b"), keyed("a2", "a"))
		do(pauseCmd("q", "a", 0))
		do(pauseCmd("q", "", 500))
		do(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{
			{Queue: "q", MessageId: ids[0], ConsumerId: "c", DeadlineMs: h.now + 1000, LeaseToken: 7},
			{Queue: "q", MessageId: ids[1], ConsumerId: "c", DeadlineMs: h.now + 1000, LeaseToken: 8},
		}}}})
		h.now += 600
		do(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}})
		do(resumeCmd("q", "a"))
		do(ackWithGrants([]*fsmv1.Ref{{Queue: "q", MessageId: ids[0], LeaseToken: 7}}, &fsmv1.Grant{Queue: "q", MessageId: ids[2], ConsumerId: "c", DeadlineMs: h.now + 1000, LeaseToken: 9}))
		return out
	}
	with, without := run(true), run(false)
	for i := range with {
		if with[i] != without[i] {
			t.Fatalf("entry %d: with pause commands\n  %s\nas empty entries\n  %s", i+1, with[i], without[i])
		}
	}
}

// TestPausesInSnapshotAndDigest: pauses are in the digest, and a replica
// restored from a snapshot refuses the same grants, shows the same pauses
// and ends a timed one at the same entry as the live one.
func TestPausesInSnapshotAndDigest(t *testing.T) {
	build := func(pause bool) (*harness, []uint64) {
		h := newHarness(t)
		h.raise(PauseVersion)
		h.create("q", nil)
		ids := h.enqueue("q", keyed("a1", "a"), keyed("b1", "b"), keyed("c1", "c"))
		if pause {
			h.mustOK(pauseCmd("q", "a", 1000))
			h.mustOK(pauseCmd("q", "c", 0))
			h.mustOK(pauseCmd("q", "unseen", 0))
		} else {
			for range 3 {
				h.tick() // the same entries, nothing paused
			}
		}
		return h, ids
	}
	live, ids := build(true)
	plain, _ := build(false)
	if digestOf(t, live.f) == digestOf(t, plain.f) {
		t.Fatal("the digest does not cover pauses")
	}
	rest := restoredCopy(t, live)
	if a, b := digestOf(t, live.f), digestOf(t, rest.f); a != b {
		t.Fatalf("restored digest %s, live %s", b, a)
	}
	if got, want := rest.info("q").PausedKeys, live.info("q").PausedKeys; !slices.Equal(got, want) || len(got) != 3 {
		t.Fatalf("restored paused keys %+v, live %+v", got, want)
	}
	if got, want := rest.readyIDs("q"), live.readyIDs("q"); !slices.Equal(got, want) {
		t.Fatalf("restored Peek %v, live %v", got, want)
	}
	for _, h := range []*harness{live, rest} {
		items := h.grantItems("q", ids[0], ids[1], ids[2])
		if !errors.Is(items[0], ErrPaused) || items[1] != nil || !errors.Is(items[2], ErrPaused) {
			t.Fatalf("grants %v", items)
		}
		h.now += 1000
		h.tick()
		if items := h.grantItems("q", ids[0], ids[2]); items[0] != nil || !errors.Is(items[1], ErrPaused) {
			t.Fatalf("after a's pause ended: %v", items)
		}
	}
	if a, b := digestOf(t, live.f), digestOf(t, rest.f); a != b {
		t.Fatalf("after the same entries: restored digest %s, live %s", b, a)
	}
}

// TestPausedKeysLeaveTheRing: the scheduler's ring (NextKey) skips paused
// keys without visiting them, Key answers none for one, and a resumed or
// expired key comes back in its place; a deleted queue takes its pauses
// along (a queue created again is not paused).
func TestPausedKeysLeaveTheRing(t *testing.T) {
	h := newHarness(t)
	h.raise(PauseVersion)
	h.create("q", nil)
	h.enqueue("q", keyed("a", "a"), keyed("b", "b"), keyed("c", "c"))
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
	h.mustOK(pauseCmd("q", "b", 0))
	h.mustOK(pauseCmd("q", "c", 50))
	if got := ring(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("ring %v, want only a", got)
	}
	h.f.Reader().Read(func(v View) {
		qv, _ := v.Queue("q")
		if _, ok := qv.Key(0, "b"); ok {
			t.Error("Key finds a paused key")
		}
		if qv.Paused() {
			t.Error("a key pause pauses the queue")
		}
	})
	h.enqueue("q", keyed("b2", "b"))
	h.mustOK(resumeCmd("q", "b"))
	h.now += 50
	h.tick()
	if got := ring(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("ring %v after resume and expiry, want a, b, c in activation order", got)
	}
	h.mustOK(pauseCmd("q", "", 0))
	h.mustOK(pauseCmd("q", "a", 1000))
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "q"}}})
	h.create("q", nil)
	if qi := h.info("q"); qi.Paused || len(qi.PausedKeys) != 0 {
		t.Fatalf("a queue created again: %+v", qi)
	}
	h.f.Reader().Read(func(v View) {
		if _, ok := v.NextDue(); ok {
			t.Error("a deleted queue's timed pause is still due")
		}
	})
}
