package fsm

import (
	"errors"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

const hour = int64(3_600_000)

// onClock sets the term and clock reading of the next entries, as a leader
// of that term would stamp them.
func (h *harness) onClock(term uint64, now int64) { h.term, h.now = term, now }

func (h *harness) ready(q string) int64 { h.t.Helper(); return h.info(q).Stats.Ready }

// TestTimeAfterAWrongClockLeader: a leader whose clock is an hour fast, or
// slow, proposes an entry and is replaced by one with a correct clock:
// from then on delays, TTLs and dedup windows take exactly as long as
// asked on the new leader's clock, and the instants the state reports are
// on that clock.
func TestTimeAfterAWrongClockLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew int64
	}{{"fast", hour}, {"slow", -hour}} {
		t.Run(tc.name, func(t *testing.T) {
			const T = int64(1_000_000_000)
			h := newHarness(t)
			h.onClock(1, T)
			h.raise(MaxLogVersion)
			h.create("q", &fsmv1.QueueConfig{DedupWindowMs: 1000})

			h.onClock(2, T+tc.skew+10) // the wrong clock leads for one entry
			h.tick()

			h.onClock(3, T+20) // replaced by a correct clock
			ids := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("delayed"), DelayMs: 1000},
				&fsmv1.EnqueueMessage{Payload: []byte("ttl"), TtlMs: 2000},
				&fsmv1.EnqueueMessage{Payload: []byte("dedup"), DedupId: "d"})
			var due int64
			h.f.Reader().Read(func(v View) { due, _ = v.NextDue() })
			if due != T+20+1000 {
				t.Fatalf("next due %d on the leader's clock, want %d", due, T+20+1000)
			}
			if ds, _ := h.f.Reader().Peek("q", 10, false); len(ds) != 2 || ds[0].EnqueuedMs != T+20 {
				t.Fatalf("peek %v, want 2 ready messages enqueued at %d", ds, T+20)
			}

			h.now = T + 20 + 999
			if h.tick(); h.ready("q") != 2 {
				t.Fatalf("the delayed message is ready before its delay")
			}
			if again := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("dedup"), DedupId: "d"}); again[0] != ids[2] {
				t.Fatal("a duplicate inside the window was accepted")
			}
			h.now = T + 20 + 1000
			if h.tick(); h.ready("q") != 3 {
				t.Fatalf("the delayed message is not ready 1 s after it was enqueued: %+v", h.info("q").Stats)
			}
			h.now = T + 20 + 1001
			if again := h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("dedup"), DedupId: "d"}); again[0] == ids[2] {
				t.Fatal("the dedup window did not lapse after 1 s")
			}
			h.now = T + 20 + 2000
			h.tick()
			if st := h.info("q").Stats; st.DeadLettered != 1 {
				t.Fatalf("the TTL did not pass 2 s after enqueue: %+v", st)
			}
		})
	}
}

// TestSlowLeaderKeepsTime: while a leader whose clock is an hour slow
// leads, time still passes for the state at the rate of its clock.
func TestSlowLeaderKeepsTime(t *testing.T) {
	const T = int64(1_000_000_000)
	h := newHarness(t)
	h.onClock(1, T)
	h.raise(MaxLogVersion)
	h.create("q", nil)
	h.onClock(2, T-hour)
	h.enqueue("q", &fsmv1.EnqueueMessage{DelayMs: 1000})
	h.now = T - hour + 1000
	if h.tick(); h.ready("q") != 1 {
		t.Fatal("under a slow leader a 1 s delay did not pass in 1 s of its clock")
	}
}

// TestFastLeaderCannotExpireLeaseEarly: a lease granted for 30 s by a
// leader with a correct clock cannot be expired by a successor whose clock
// is an hour fast until 30 s have passed on that successor's clock (the
// state refuses, whatever the leader proposes), and the successor's view
// reports the deadline on its own clock.
func TestFastLeaderCannotExpireLeaseEarly(t *testing.T) {
	const T = int64(1_000_000_000)
	h := newHarness(t)
	h.onClock(1, T)
	h.raise(MaxLogVersion)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "m")
	d := h.grant("q", "c", 30_000, ids[0])[0]
	if d.LeaseDeadlineMs != T+30_000 {
		t.Fatalf("lease deadline %d, want %d on the granting leader's clock", d.LeaseDeadlineMs, T+30_000)
	}

	fast := T + hour + 100
	h.onClock(2, fast)
	h.tick()
	h.f.Reader().Read(func(v View) {
		if dl, _ := v.NextLeaseDeadline(); dl != fast+30_000 {
			t.Errorf("next lease deadline %d on the fast clock, want %d", dl, fast+30_000)
		}
		if refs := v.ExpiredLeases(fast+100, 10); len(refs) != 0 {
			t.Errorf("the fast leader sees %d expired leases", len(refs))
		}
	})
	expire := func() error {
		res := as[*ItemsResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{ref(d)}}}}))
		return res.Items[0]
	}
	h.now = fast + 100
	if err := expire(); !errors.Is(err, ErrStaleLease) {
		t.Fatalf("a fast leader expired a 30 s lease %d ms after it took over: %v", h.now-fast, err)
	}
	h.f.Reader().Read(func(v View) {
		if c, _, ok := v.Lease("q", ids[0]); !ok || c != "c" {
			t.Error("the lease is gone")
		}
	})
	h.now = fast + 29_999
	if err := expire(); !errors.Is(err, ErrStaleLease) {
		t.Fatalf("expired before 30 s: %v", err)
	}
	h.now = fast + 30_000
	if err := expire(); err != nil {
		t.Fatalf("not expired after 30 s: %v", err)
	}
}

// TestVersion3KeepsTheOldClock: entries of log versions before 4 move the
// clock to max(last, now_ms), so an old log replays as it did.
func TestVersion3KeepsTheOldClock(t *testing.T) {
	const T = int64(1_000_000_000)
	h := newHarness(t)
	h.onClock(1, T)
	h.raise(3)
	h.onClock(2, T+hour)
	h.tick()
	h.onClock(3, T)
	h.tick()
	if h.f.Reader().Now() != T+hour {
		t.Fatalf("clock %d after a version-3 entry stamped an hour ahead, want %d", h.f.Reader().Now(), T+hour)
	}
}

// TestVersion4ContinuesTheOldClock: the first entry of version 4 picks up
// the clock where the older rule left it, even when it was stamped before
// the last older entry (concurrent proposals): instants handed out do not
// jump back at the change of rule.
func TestVersion4ContinuesTheOldClock(t *testing.T) {
	const T = int64(1_000_000_000)
	h := newHarness(t)
	h.onClock(1, T)
	h.create("q", nil)
	h.now = T + 10
	h.enqueuePayloads("q", "x")
	h.now = T + 4 // the raise was stamped before the enqueue, applied after
	h.raise(MaxLogVersion)
	if ds, _ := h.f.Reader().Peek("q", 1, false); ds[0].EnqueuedMs != T+10 {
		t.Fatalf("enqueued at %d after the change of rule, was %d", ds[0].EnqueuedMs, T+10)
	}
	h.now = T + 20
	h.tick()
	if ds, _ := h.f.Reader().Peek("q", 1, false); ds[0].EnqueuedMs != T+10 || h.f.Reader().Now() != T+20 {
		t.Fatalf("enqueued at %d, clock %d; want %d, %d", ds[0].EnqueuedMs, h.f.Reader().Now(), T+10, T+20)
	}
}

// TestOlderEntryAfterVersion4: an entry proposed under the older cluster
// version but applied after the raise (it raced it) moves the clock by
// elapsed time too, so what the state hands out stays on the leader's
// clock.
func TestOlderEntryAfterVersion4(t *testing.T) {
	const T = int64(1_000_000_000)
	h := newHarness(t)
	h.onClock(1, T)
	h.create("q", nil)
	h.now = T + 4
	h.raise(MaxLogVersion)
	h.version = 1 // stamped before the raise applied
	h.now = T + 14
	h.enqueuePayloads("q", "x")
	if ds, _ := h.f.Reader().Peek("q", 1, false); ds[0].EnqueuedMs != T+14 {
		t.Fatalf("enqueued at %d, want the entry's stamp %d", ds[0].EnqueuedMs, T+14)
	}
	h.version = MaxLogVersion
	h.onClock(2, T+20)
	h.tick()
	h.onClock(2, T+1020)
	h.enqueue("q", &fsmv1.EnqueueMessage{DelayMs: 1000})
	h.now = T + 2020
	if h.tick(); h.ready("q") != 2 {
		t.Fatal("a 1 s delay did not pass in 1 s")
	}
}
