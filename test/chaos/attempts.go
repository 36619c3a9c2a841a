package chaos

import (
	"fmt"
	"slices"
	"time"
)

// The attempt rules (DESIGN.md, "Attempts against deliveries"): an attempt
// counts only when its delivery was, or may have been, handed to a
// consumer. Consumers cannot see "may have been", so these rules flag only
// what no legitimate loss explains.
const (
	// One consumer saw a message's attempt numbers go down or repeat
	// (with a new token).
	InvAttemptOrder = "attempt-not-increasing"
	// An attempt number no consumer saw, in a stretch of the run where
	// nothing could have hidden a delivery from its consumer: no fault,
	// no stream of that queue ending.
	InvUnseenAttempt = "attempt-without-delivery"
)

// Margins around the moments a delivery may have been hidden. They only
// widen what excuses an unseen attempt, so larger is safer, never looser.
const (
	// windowSlackMs widens an unseen attempt's window before its start
	// (millisecond rounding, grant time taken from the broker's clock).
	windowSlackMs = 1000
	// endSlackMs widens it after its end: the consumer may record a
	// stream's end after the broker has released its leases and granted
	// again (a loaded machine delays the consumer's goroutine).
	endSlackMs = 5000
	// faultAfterExtraMs: a fault's effects outlast its heal (a stream
	// stuck behind a healed partition resumes or breaks; a deposed leader
	// hands its unsent grants back; leases granted before the heal expire
	// within a visibility timeout). A fault counts until two of the
	// longest visibility timeouts granted before the last heal, plus
	// this, after its heal.
	faultAfterExtraMs = 5000
)

// checkAttemptOrder: each consumer reads its streams one after another
// (the next opens only after the last one's Recv failed), and one node
// pushes a stream's grants in log order, so the attempts one consumer sees
// for one message follow the log. Attempts only grow in the log, except
// by a rollback of a grant that was never sent, or a redrive (the workload
// sends neither, and an unsent grant is never seen). So each new token one
// consumer sees carries a higher attempt than the last one it saw. History
// order is receive order per consumer: one goroutine records its deliveries.
// Across consumers, receive order is not grant order (a stuck stream
// delivers late), so nothing is said there beyond attempt-reused.
func checkAttemptOrder(h *History, add func(Violation)) {
	type key struct{ consumer, id string }
	last := map[key]Delivery{}
	for _, d := range h.Deliveries {
		k := key{d.Consumer, d.MessageID}
		prev, ok := last[k]
		if ok && prev.Token == d.Token {
			continue // the same lease seen again: two-holders' business
		}
		if ok && d.Attempt <= prev.Attempt {
			add(Violation{InvAttemptOrder, d.MessageID, d.Payload, fmt.Sprintf(
				"%s saw attempt %d (token %s, %s, stream %d) at %s after attempt %d (token %s, %s, stream %d) at %s",
				d.Consumer, d.Attempt, d.Token, d.Queue, d.Stream, d.Recv.Format(timeFmt),
				prev.Attempt, prev.Token, prev.Queue, prev.Stream, prev.Recv.Format(timeFmt))})
		}
		last[k] = d
	}
}

// hideWindow is a stretch of time that may have hidden a pushed grant
// from its consumer, for the queues it names ("" = every queue).
type hideWindow struct {
	queue    string
	from, to int64 // ms, Unix
}

// hiders lists every moment that may legitimately hide a delivery: each
// fault (any kind: kills, pauses, cuts and restarts all break or stall
// streams, or end a leader that held grants), widened by faultAfter; each
// stream the consumer dropped, which discards what was in flight; each
// stream that ended with an error, which may have eaten the grants pushed
// just before. Not a stream the client ended with RESOURCE_EXHAUSTED: the
// broker caps a batch at what a default client accepts
// (LeaseRequest.max_batch_bytes), so that end is the broker's fault, the
// very way issue 11 burned attempts on large messages.
func hiders(h *History) []hideWindow {
	// Leases that matter to a fault's shadow were granted before it
	// healed (later streams, like the drain's, may ask for longer ones).
	var lastHeal time.Time
	for _, f := range h.Faults {
		if f.End.After(lastHeal) {
			lastHeal = f.End
		}
	}
	var maxVis int64
	for _, d := range h.Deliveries {
		if !d.Recv.After(lastHeal) {
			maxVis = max(maxVis, d.VisibilityMs)
		}
	}
	after := 2*maxVis + faultAfterExtraMs
	var out []hideWindow
	for _, f := range h.Faults {
		out = append(out, hideWindow{"", f.Start.UnixMilli(), f.End.UnixMilli() + after})
	}
	for _, d := range h.Drops {
		ms := d.At.UnixMilli()
		out = append(out, hideWindow{d.Queue, ms, ms})
	}
	for _, e := range h.Ends {
		if e.Code == "ResourceExhausted" {
			continue
		}
		ms := e.At.UnixMilli()
		out = append(out, hideWindow{e.Queue, ms, ms})
	}
	return out
}

// checkUnseenAttempts: attempt numbers of one message form one sequence
// across its queue and its dead-letter queue (a dead-lettered message
// keeps its count). Every number below the highest seen was counted by a
// grant that was not rolled back. A number no consumer saw was granted
// after the grant of the seen number below it and before the grant of the
// seen number above it (or, for attempt 1, after its first enqueue
// started); its delivery was hidden by something in that stretch. If no
// fault overlaps it and no stream of the message's queue or DLQ was
// dropped or ended, nothing hid it: the broker counted an attempt it never
// delivered. This is how a message dead-lettered for max_deliveries
// without reaching a worker shows: its DLQ delivery carries an attempt
// above every attempt consumers saw.
func checkUnseenAttempts(h *History, msgs map[string]*msgState, ids []string, add func(Violation)) (unseen, excused int) {
	family := map[string]string{} // queue or DLQ -> the work queue
	for _, q := range h.Queues {
		family[q.Name], family[q.DeadLetter] = q.Name, q.Name
	}
	enqStart := map[string]time.Time{}
	for _, op := range h.Enqueues {
		for _, p := range op.Payloads {
			if t, ok := enqStart[p]; !ok || op.Start.Before(t) {
				enqStart[p] = op.Start
			}
		}
	}
	hs := hiders(h)
	for _, id := range ids {
		m := msgs[id]
		if len(m.deliveries) == 0 {
			continue
		}
		fam, ok := family[m.deliveries[0].Queue]
		if !ok {
			continue
		}
		// The earliest seen delivery of each attempt number.
		first := map[int32]Delivery{}
		for _, d := range m.deliveries {
			if f, ok := first[d.Attempt]; !ok || d.Recv.Before(f.Recv) {
				first[d.Attempt] = d
			}
		}
		attempts := make([]int32, 0, len(first))
		for a := range first {
			attempts = append(attempts, a)
		}
		slices.Sort(attempts)
		prev := int32(0)
		var from int64 // 0: since the start of time
		if t, ok := enqStart[m.payload]; ok {
			from = t.UnixMilli()
		}
		for _, a := range attempts {
			if a < 1 {
				continue
			}
			d := first[a]
			if a > prev+1 {
				gap := int(a - prev - 1)
				unseen += gap
				lo, hi := from-windowSlackMs, d.Recv.UnixMilli()+endSlackMs
				if hidden(hs, fam, family, lo, hi) {
					excused += gap
				} else {
					add(Violation{InvUnseenAttempt, id, m.payload, fmt.Sprintf(
						"attempts %d..%d of %s were counted but never seen, and between %s and %s (attempt %d to %s, token %s) no fault ran and no stream of %s or its DLQ ended",
						prev+1, a-1, fam, time.UnixMilli(lo+windowSlackMs).UTC().Format(timeFmt), d.Recv.Format(timeFmt), a, d.Consumer, d.Token, fam)})
				}
			}
			prev = a
			from = min(d.grantMs(), d.Recv.UnixMilli())
		}
	}
	return unseen, excused
}

// hidden reports whether something in hs, on a queue of family fam,
// overlaps [lo, hi].
func hidden(hs []hideWindow, fam string, family map[string]string, lo, hi int64) bool {
	return slices.ContainsFunc(hs, func(w hideWindow) bool {
		return (w.queue == "" || family[w.queue] == fam) && w.from <= hi && w.to >= lo
	})
}
