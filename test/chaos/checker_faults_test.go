package chaos

import (
	"slices"
	"testing"
)

// clockedHistory adds message m9 to the clean history: attempt 1 (token
// ta) on c1's stream, attempt 2 (token tb) on c2's, acked.
func clockedHistory(a, b Delivery) *History {
	h := cleanHistory()
	h.Enqueues = append(h.Enqueues, enq("z", OK, 800, 810, "m9"))
	h.Deliveries = append(h.Deliveries, a, b)
	h.Settles = append(h.Settles, settle(Ack, "m9", "tb", OK, b.Recv.Sub(t0).Milliseconds()+100, b.Recv.Sub(t0).Milliseconds()+110))
	return h
}

const fiveMin = 5 * 60 * 1000

// TestCheckerReadsDeadlinesOnTheGrantingClock: a lease granted by a node
// started with its clock five minutes fast carries a deadline five
// minutes ahead. The checker reads it on the true clock: an overlap it
// hides is still caught, and a lease that ended is not held valid.
func TestCheckerReadsDeadlinesOnTheGrantingClock(t *testing.T) {
	t.Run("an overlap behind a fast clock is caught", func(t *testing.T) {
		a := deliver("c1", "q", "m9", "z", "ta", 1, 1000, 1001)
		a.Node = "n1"
		// n2, five minutes fast, granted attempt 2 at 2000 (true).
		b := deliver("c2", "q", "m9", "z", "tb", 2, 2000+fiveMin, 2001)
		b.Node = "n2"
		h := clockedHistory(a, b)
		// ta's extension, begun after tb's grant, succeeded: two holders.
		h.Settles = append(h.Settles, settle(Extend, "m9", "ta", OK, 2500, 2510))
		h.Clocks = []ClockChange{{Node: "n2", At: at(1500), OffsetMs: fiveMin}}
		r := Check(h)
		if r.ViolationsByInvariant[InvTwoHolders] != 1 {
			t.Fatalf("want the two holders flagged, got %+v", r.Violations)
		}
		// What the correction is for: read on n2's clock, the grant looks
		// five minutes later than the extension, and the overlap is missed.
		h.Clocks = nil
		if r := Check(h); !r.OK() {
			t.Fatalf("without the clock change: %+v", r.Violations)
		}
	})
	t.Run("a lease that ended is not held valid by a fast deadline", func(t *testing.T) {
		// n2 started five minutes fast at 500 and granted ta at 1000 (true),
		// so it ended at 4000; n2 came back on the true clock at 4500.
		a := deliver("c1", "q", "m9", "z", "ta", 1, 1000+fiveMin, 1001)
		a.Node = "n2"
		b := deliver("c2", "q", "m9", "z", "tb", 2, 5000, 5001) // c1's stream still open (m5 at 5100)
		b.Node = "n1"
		h := clockedHistory(a, b)
		h.Clocks = []ClockChange{
			{Node: "n2", At: at(500), OffsetMs: fiveMin},
			{Node: "n1", At: at(600), OffsetMs: -fiveMin, Runtime: true}, // a running node's jump moves nothing
			{Node: "n2", At: at(4500), OffsetMs: 0},
		}
		if r := Check(h); !r.OK() {
			t.Fatalf("flagged: %+v", r.Violations)
		}
		if r := Check(h); r.ClockedStarts != 1 {
			t.Fatalf("clocked starts %d, want 1", r.ClockedStarts)
		}
		h.Clocks = nil
		if r := Check(h); r.ViolationsByInvariant[InvTwoHolders] != 1 {
			t.Fatalf("read on n2's clock the lease looks valid for five minutes more: want it flagged, got %+v", r.Violations)
		}
	})
	t.Run("an extension's deadline while a clock is off is its earliest end", func(t *testing.T) {
		a := deliver("c1", "q", "m9", "z", "ta", 1, 1000, 1001)
		b := deliver("c2", "q", "m9", "z", "tb", 2, 5000, 5001)
		h := clockedHistory(a, b)
		ext := settle(Extend, "m9", "ta", OK, 2000, 2010)
		ext.VisibilityMs, ext.NewDeadlineMs = vt, at(2005).UnixMilli()+vt+fiveMin // answered by a fast leader
		h.Settles = append(h.Settles, ext)
		h.Clocks = []ClockChange{{Node: "n3", At: at(100), OffsetMs: fiveMin}}
		// Valid until 5000 at the earliest (2000 + 3000): tb at 5000 is no
		// overlap; with the fast deadline it would be five minutes of one.
		if r := Check(h); !r.OK() {
			t.Fatalf("flagged: %+v", r.Violations)
		}
	})
}

// TestCheckerFlagsStaleRead: a linearizable read that misses a write
// acknowledged before it began is a violation; a refused one, a stale-
// header one, or one that overlaps the write is not.
func TestCheckerFlagsStaleRead(t *testing.T) {
	write := PauseReadOp{Write: true, Node: "n2", Value: registerBase + 1, Start: at(1000), End: at(1100), Outcome: OK}
	read := func(stale bool, value int64, out Outcome, startMs int64) PauseReadOp {
		return PauseReadOp{Node: "n1", Stale: stale, Value: value, Start: at(startMs), End: at(startMs + 5), Outcome: out}
	}
	h := cleanHistory()
	h.Reads = []PauseReadOp{
		write,
		read(false, registerBase+1, OK, 1200), // sees it
		read(false, 0, Failed, 1200),          // refused
		read(true, registerBase, OK, 1200),    // stale header: may miss it
		read(false, registerBase, OK, 1050),   // began before the write was acknowledged
		{Write: true, Node: "n2", Value: registerBase + 2, Start: at(1300), End: at(1400), Outcome: Unknown},
		read(false, registerBase+1, OK, 1500), // the unanswered write need not be seen
	}
	r := Check(h)
	if !r.OK() {
		t.Fatalf("flagged: %+v", r.Violations)
	}
	if r.RegisterReads != 3 || r.RegisterReadsRefused != 1 || r.RegisterStaleReads != 1 || r.RegisterStaleMissed != 1 {
		t.Fatalf("figures: %+v", r)
	}
	// The old leader, back from its pause, answers from its own state.
	h.Reads = append(h.Reads, read(false, registerBase, OK, 1210))
	r = Check(h)
	if r.ViolationsByInvariant[InvStaleRead] != 1 {
		t.Fatalf("stale read not flagged: %+v", r.Violations)
	}
}

// TestCheckerFlagsRejoinFailure: a removed node that did not come back a
// voter is a violation.
func TestCheckerFlagsRejoinFailure(t *testing.T) {
	h := cleanHistory()
	h.Rejoins = []Rejoin{{Node: "n2", During: "kill of leader n1", Removed: true, RemoveAt: at(100), Voter: true}}
	if r := Check(h); !r.OK() || r.Rejoins != 1 {
		t.Fatalf("flagged: %+v", r.Violations)
	}
	h.Rejoins = append(h.Rejoins, Rejoin{Node: "n3", During: "cut n1", Removed: true, RemoveAt: at(200), Err: "rejoin: 2 healthy voters of 3"})
	r := Check(h)
	if !slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Invariant == InvRejoinFailed }) {
		t.Fatalf("not flagged: %+v", r.Violations)
	}
}
