package chaos

import (
	"fmt"
	"time"
)

// Invariants of the membership, clock-jump and pause-read faults.
const (
	// A linearizable read of the register answered a value older than a
	// write acknowledged before the read began.
	InvStaleRead = "stale-read"
	// A node removed and started again was not a healthy voter within
	// the bound after its fault healed.
	InvRejoinFailed = "rejoin-failed"
)

// onTrueClock returns h with every lease deadline on the true clock. A
// delivery's deadline is on the clock of the node that served its stream
// (the leader that granted it), which a clock jump may have started some
// minutes off (History.Clocks): that offset is taken off. An extension's
// new deadline comes through the client from whichever node led; while
// any node's clock is off it is replaced by the earliest the lease can
// end, the call's start plus the time asked for (the leader stamps the
// extension after the call began, and the state's clock never runs ahead
// of real time), so an overlap is only flagged if it certainly happened.
// A history without clock changes is returned as it is.
func onTrueClock(h *History) *History {
	if len(h.Clocks) == 0 {
		return h
	}
	out := *h
	out.Deliveries = make([]Delivery, len(h.Deliveries))
	for i, d := range h.Deliveries {
		d.DeadlineMs -= clockOffsetMs(h.Clocks, d.Node, d.Recv)
		out.Deliveries[i] = d
	}
	out.Settles = make([]Settle, len(h.Settles))
	for i, s := range h.Settles {
		if s.Kind == Extend && s.NewDeadlineMs > 0 && anyClockOff(h.Clocks, s.Start, s.End) {
			s.NewDeadlineMs = 0
			if s.VisibilityMs > 0 {
				s.NewDeadlineMs = s.Start.UnixMilli() + s.VisibilityMs
			}
		}
		out.Settles[i] = s
	}
	return &out
}

// clockOffsetMs is how far node's broker clock ran ahead at t: the offset
// of its last start before t (runtime jumps move nothing).
func clockOffsetMs(clocks []ClockChange, node string, t time.Time) int64 {
	var off int64
	var at time.Time
	for _, c := range clocks {
		if c.Node == node && !c.Runtime && !c.At.After(t) && !c.At.Before(at) {
			off, at = c.OffsetMs, c.At
		}
	}
	return off
}

// anyClockOff reports whether some node's broker clock was off at any
// moment of [from, to].
func anyClockOff(clocks []ClockChange, from, to time.Time) bool {
	for _, c := range clocks {
		if c.Runtime {
			continue
		}
		if clockOffsetMs(clocks, c.Node, from) != 0 || (c.OffsetMs != 0 && !c.At.Before(from) && !c.At.After(to)) {
			return true
		}
	}
	return false
}

// checkReads: a linearizable read of the register (which only grows)
// must answer at least the highest value whose write was acknowledged
// before the read began. A refused or redirected read says nothing. Stale
// reads (the header) may miss writes; how many did is reported, to show
// the window the fault opened.
func checkReads(h *History, r *Report, add func(Violation)) {
	for _, rd := range h.Reads {
		if rd.Write {
			continue
		}
		if rd.Outcome != OK {
			r.RegisterReadsRefused++
			continue
		}
		var want int64
		var by PauseReadOp
		for _, w := range h.Reads {
			if w.Write && w.Outcome == OK && w.End.Before(rd.Start) && w.Value > want {
				want, by = w.Value, w
			}
		}
		if rd.Stale {
			r.RegisterStaleReads++
			if rd.Value < want {
				r.RegisterStaleMissed++
			}
			continue
		}
		r.RegisterReads++
		if rd.Value < want {
			add(Violation{Invariant: InvStaleRead, Detail: fmt.Sprintf(
				"read on %s [%s..%s] answered %d; the write of %d through %s was acknowledged at %s, before it",
				rd.Node, rd.Start.Format(timeFmt), rd.End.Format(timeFmt), rd.Value, want, by.Node, by.End.Format(timeFmt))})
		}
	}
}

// checkRejoins: every node a membership step removed came back a voter.
func checkRejoins(h *History, r *Report, add func(Violation)) {
	for _, j := range h.Rejoins {
		r.Rejoins++
		if j.OutOfConfig {
			r.RemovedFromConfig++
		}
		if !j.Voter {
			add(Violation{Invariant: InvRejoinFailed, Detail: fmt.Sprintf(
				"%s, removed during the %s (remove answered success: %t, fresh data dir: %t), was not a healthy voter again: %s",
				j.Node, j.During, j.Removed, j.FreshDir, j.Err)})
		}
	}
	for _, c := range h.Clocks {
		if !c.Runtime && c.OffsetMs != 0 {
			r.ClockedStarts++
		}
	}
}
