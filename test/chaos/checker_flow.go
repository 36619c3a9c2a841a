package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Invariants of flow control (issue 23): concurrency caps, per-key order
// under a cap of 1, pauses, and a message's story across failover.
const (
	// More messages of one concurrency key were certainly in flight at
	// once than the key's cap.
	InvOverCap = "over-concurrency-cap"
	// Under a cap of 1, a later message of the key was granted while an
	// earlier one was not settled (it was granted again afterwards).
	InvKeyOrder = "key-order"
	// A key was granted a message while its pause certainly held.
	InvPausedGrant = "paused-key-granted"
	// While one key was paused, with no fault near, the queue's other
	// keys got no grant although an uncapped message waited.
	InvPauseStoppedOthers = "pause-stopped-other-keys"
	// A timed pause did not end by itself: its key, with a message
	// waiting, got no grant within the bound after the pause's end.
	InvPauseNotEnded = "pause-did-not-end"
	// After a change of leader, GetMessage of a message the old leader
	// had leased did not list that lease (or did not find the message).
	InvHistoryLostLease = "history-lost-lease"
)

const (
	// pauseFlowBoundMs: a key flows again within this of its pause's
	// latest end (a cap-1 key's head may still be held by a lease granted
	// before the pause, up to a visibility timeout and its extension, or
	// back from a nack with a short delay).
	pauseFlowBoundMs = 10000
	// pauseQuietMs is the shortest certain pause window the other-keys
	// rule judges (a consumer's reconnect takes up to 300 ms).
	pauseQuietMs = 2000
	// maxFlowViolationsPerKey bounds the cap and order violations listed
	// per key: one broken rule tends to break it many times in a row.
	maxFlowViolationsPerKey = 5
)

// FlowFigures are the flow-control figures of a run.
type FlowFigures struct {
	// CappedLeases are the leases of capped keys judged by the cap rule;
	// MaxInFlight is, per key, the most leases certainly in flight at
	// once (never above its cap in a good run).
	CappedLeases int              `json:"capped_leases"`
	MaxInFlight  map[string]int   `json:"max_in_flight,omitempty"`
	Caps         map[string]int32 `json:"caps,omitempty"`
	// OrderedMessages are the messages of keys capped at 1, and
	// OrderedAcrossLeaders how often one of those keys' consecutive grants
	// came from different leaders (the order held across a failover).
	OrderedMessages      int `json:"ordered_messages"`
	OrderedAcrossLeaders int `json:"ordered_across_leaders"`
	// Pauses answered ok; PausesAcrossLeaders of them had their key's last
	// grant before and first grant after from different leaders;
	// PausesJudgedEnd were held to the end rule (the workload outlived
	// their bound); PauseLatenessMs are, per judged pause, how long after
	// its end its key's first grant came (ms, sorted).
	Pauses              int     `json:"pauses"`
	PausesAcrossLeaders int     `json:"pauses_across_leaders"`
	PausesJudgedEnd     int     `json:"pauses_judged_end"`
	PauseLatenessMs     []int64 `json:"pause_lateness_ms,omitempty"`
	// Lookups answered, and how many of them found the old leader's lease.
	Lookups      int `json:"lookups"`
	LookupsFound int `json:"lookups_found"`
}

// keyedLease is one lease of a message of a keyed queue, as the flow
// rules see it: granted at g (leader's clock, as a deadline minus the
// stream's visibility timeout), certainly held until e (ms).
type keyedLease struct {
	d    Delivery
	key  string
	g, e int64
}

// heldUntilMs is the last moment (ms) d's lease was certainly held: while
// it was valid (validUntilMs) and its stream certainly open (a later
// grant on it), or until a successful ack, nack or extension of it may
// have taken effect (the broker accepted the token, so it was still
// held then).
func heldUntilMs(d Delivery, settles []Settle, drops map[int64]time.Time, streams streamGrants) int64 {
	e := min(validUntilMs(d, settles, drops), streams[d.Stream])
	for _, s := range settles {
		if s.Token == d.Token && s.Outcome == OK {
			e = max(e, mayHaveTakenEffectFrom(s, settles))
		}
	}
	return e
}

// checkFlow holds the flow-control invariants over h (already on the
// true clock).
func checkFlow(h *History, drops map[int64]time.Time, streams streamGrants, add func(Violation)) FlowFigures {
	f := FlowFigures{MaxInFlight: map[string]int{}, Caps: map[string]int32{}}
	keyed := map[string]QueueSpec{}
	for _, q := range h.Queues {
		if len(q.Keys) > 0 {
			keyed[q.Name] = q
		}
	}
	checkLookups(h, &f, add)
	if len(keyed) == 0 {
		return f
	}
	// Each payload's key, from its enqueues.
	keyOf := map[string]string{}
	enqueuedOK := map[string]time.Time{} // payload -> end of its first ok enqueue
	for _, op := range h.Enqueues {
		if _, ok := keyed[op.Queue]; !ok {
			continue
		}
		for i, p := range op.Payloads {
			if i < len(op.Keys) {
				keyOf[p] = op.Keys[i]
			}
			if t, seen := enqueuedOK[p]; op.Outcome == OK && (!seen || op.End.Before(t)) {
				enqueuedOK[p] = op.End
			}
		}
	}
	settles := map[string][]Settle{}
	for _, s := range h.Settles {
		settles[s.MessageID] = append(settles[s.MessageID], s)
	}
	// Leases of keyed queues by (queue, key), one per token.
	type qk struct{ queue, key string }
	leases := map[qk][]keyedLease{}
	seen := map[string]bool{}
	firstGrant := map[string]int64{} // payload -> its first grant (ms)
	for _, d := range h.Deliveries {
		if _, ok := keyed[d.Queue]; !ok || seen[d.Token] {
			continue
		}
		seen[d.Token] = true
		k := keyOf[d.Payload]
		l := keyedLease{d: d, key: k, g: d.grantMs(), e: heldUntilMs(d, settles[d.MessageID], drops, streams)}
		leases[qk{d.Queue, k}] = append(leases[qk{d.Queue, k}], l)
		if g, ok := firstGrant[d.Payload]; !ok || l.g < g {
			firstGrant[d.Payload] = l.g
		}
	}
	groups := make([]qk, 0, len(leases))
	for g := range leases {
		groups = append(groups, g)
		slices.SortFunc(leases[g], func(a, b keyedLease) int { return cmp.Or(cmp.Compare(a.g, b.g), cmp.Compare(a.d.Token, b.d.Token)) })
	}
	slices.SortFunc(groups, func(a, b qk) int { return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.key, b.key)) })
	for _, g := range groups {
		c := keyed[g.queue].capOf(g.key)
		if c <= 0 {
			continue
		}
		name := g.queue + "/" + g.key
		f.Caps[name] = c
		f.CappedLeases += len(leases[g])
		f.MaxInFlight[name] = checkCap(name, c, leases[g], add)
		if c == 1 {
			n, across := checkKeyOrder(name, leases[g], add)
			f.OrderedMessages += n
			f.OrderedAcrossLeaders += across
		}
	}
	checkPauses(h, keyed, func(queue, key string) []keyedLease { return leases[qk{queue, key}] },
		keyOf, enqueuedOK, firstGrant, &f, add)
	return f
}

// checkCap: at every grant of the key, the distinct messages whose leases
// were certainly held then (granted no later, held past it) number at
// most the cap. It returns the most seen at once.
func checkCap(name string, c int32, ls []keyedLease, add func(Violation)) int {
	var active []keyedLease
	most, reported := 0, 0
	for _, l := range ls {
		active = slices.DeleteFunc(active, func(a keyedLease) bool { return a.e <= l.g+clockSlackMs })
		held := map[string]keyedLease{l.d.MessageID: l}
		for _, a := range active {
			held[a.d.MessageID] = a
		}
		most = max(most, len(held))
		if len(held) > int(c) && reported < maxFlowViolationsPerKey {
			reported++
			var parts []string
			for _, a := range active {
				if a.d.MessageID != l.d.MessageID {
					parts = append(parts, fmt.Sprintf("%s (token %s, %s, granted %d, held until at least %d)", a.d.MessageID, a.d.Token, a.d.Consumer, a.g, a.e))
				}
			}
			sort.Strings(parts)
			add(Violation{InvOverCap, l.d.MessageID, l.d.Payload, fmt.Sprintf(
				"key %s (cap %d): granted to %s at %d (token %s) while %d others were in flight: %s",
				name, c, l.d.Consumer, l.g, l.d.Token, len(held)-1, strings.Join(parts, "; "))})
		}
		active = append(active, l)
	}
	return most
}

// checkKeyOrder: under a cap of 1 a key's messages go in enqueue (id)
// order, each settled before the next is granted; a head that comes back
// (nack, expiry) is granted again before the next. So an earlier message
// granted after a later one's first grant was unsettled while the later
// one went: a violation. It returns the key's messages and how often
// consecutive grants came from different leaders.
func checkKeyOrder(name string, ls []keyedLease, add func(Violation)) (msgs, across int) {
	type span struct {
		id, payload  string
		first, last  keyedLease
		firstG, lasG int64
	}
	byID := map[string]*span{}
	for i, l := range ls {
		if i > 0 && ls[i-1].d.Node != "" && l.d.Node != "" && ls[i-1].d.Node != l.d.Node {
			across++
		}
		s := byID[l.d.MessageID]
		if s == nil {
			byID[l.d.MessageID] = &span{id: l.d.MessageID, payload: l.d.Payload, first: l, last: l, firstG: l.g, lasG: l.g}
			continue
		}
		if l.g < s.firstG {
			s.first, s.firstG = l, l.g
		}
		if l.g > s.lasG {
			s.last, s.lasG = l, l.g
		}
	}
	spans := make([]*span, 0, len(byID))
	for _, s := range byID {
		spans = append(spans, s)
	}
	// Ids are 16 hex digits: string order is enqueue order.
	slices.SortFunc(spans, func(a, b *span) int { return cmp.Compare(a.id, b.id) })
	reported := 0
	var later *span // the later message granted first so far
	for i := len(spans) - 1; i >= 0; i-- {
		s := spans[i]
		if later != nil && s.lasG > later.firstG+clockSlackMs && reported < maxFlowViolationsPerKey {
			reported++
			add(Violation{InvKeyOrder, later.id, later.payload, fmt.Sprintf(
				"key %s (cap 1): %s was granted to %s at %d (token %s) while the earlier %s was unsettled: it was granted again to %s at %d (token %s, attempt %d)",
				name, later.id, later.first.d.Consumer, later.firstG, later.first.d.Token, s.id, s.last.d.Consumer, s.lasG, s.last.d.Token, s.last.d.Attempt)})
		}
		if later == nil || s.firstG < later.firstG {
			later = s
		}
	}
	return len(spans), across
}

// checkPauses: while a pause of a key certainly holds (from its answer to
// its start plus its duration: the state's clock never runs ahead of real
// time, so the pause cannot end sooner), the key gets no grant, and, with
// no fault near, the queue's other keys do (if an uncapped message was
// waiting); once a timed pause has certainly ended (its answer plus its
// duration, plus every fault's hold that overlaps it, in which the state's
// clock may have stood still), its key, with a message waiting, is granted
// again within pauseFlowBoundMs.
func checkPauses(h *History, keyed map[string]QueueSpec, leasesOf func(queue, key string) []keyedLease,
	keyOf map[string]string, enqueuedOK map[string]time.Time, firstGrant map[string]int64, f *FlowFigures, add func(Violation)) {
	for _, p := range h.Pauses {
		q, ok := keyed[p.Queue]
		if !ok || p.Outcome != OK || p.DurationMs <= 0 {
			continue
		}
		f.Pauses++
		from, to := p.End.UnixMilli()+clockSlackMs, p.Start.UnixMilli()+p.DurationMs-clockSlackMs
		own := leasesOf(p.Queue, p.Key)
		var before, after *keyedLease
		for i := range own {
			l := &own[i]
			if l.g > from && l.g < to {
				add(Violation{InvPausedGrant, l.d.MessageID, l.d.Payload, fmt.Sprintf(
					"key %s/%s paused for %d ms (answered %s, so paused until at least %d) was granted to %s at %d (token %s)",
					p.Queue, p.Key, p.DurationMs, p.End.Format(timeFmt), to, l.d.Consumer, l.g, l.d.Token)})
			}
			if l.g <= p.Start.UnixMilli() {
				before = l
			} else if after == nil && l.g >= to {
				after = l
			}
		}
		if before != nil && after != nil && before.d.Node != "" && after.d.Node != "" && before.d.Node != after.d.Node {
			f.PausesAcrossLeaders++
		}
		if to-from >= pauseQuietMs && !faultNear(h.Faults, from, to) {
			checkOthersFlow(h, q, p, from, to, leasesOf, keyOf, enqueuedOK, firstGrant, add)
		}
		// The pause's latest end: its answer plus its duration, plus the
		// holds of the faults overlapping it (elections lose state time).
		latest := p.End.UnixMilli() + p.DurationMs
		counted := map[int]bool{}
		for changed := true; changed; {
			changed = false
			for i, fe := range h.Faults {
				if !counted[i] && fe.Start.UnixMilli() <= latest && fe.End.UnixMilli() >= p.Start.UnixMilli() {
					counted[i], changed = true, true
					latest += fe.End.Sub(fe.Start).Milliseconds()
				}
			}
		}
		bound := latest + pauseFlowBoundMs
		if h.WorkloadEnd.IsZero() || h.WorkloadEnd.UnixMilli() < bound {
			continue // the workload stopped first: not judged
		}
		f.PausesJudgedEnd++
		if after != nil && after.g <= bound {
			end := p.Start.UnixMilli() + p.DurationMs
			if p.UntilMs > 0 && !anyClockOff(h.Clocks, p.Start, p.End) {
				end = p.UntilMs
			}
			f.PauseLatenessMs = append(f.PauseLatenessMs, max(0, after.g-end))
			continue
		}
		// No grant in time: a violation if a message of the key was
		// waiting (enqueued before the latest end, first granted after the
		// bound or never).
		waiting := ""
		for pl, k := range keyOf {
			t, ok := enqueuedOK[pl]
			if k != p.Key || !ok || t.UnixMilli() > latest {
				continue
			}
			if g, granted := firstGrant[pl]; granted && g <= bound {
				continue
			}
			if waiting == "" || pl < waiting {
				waiting = pl
			}
		}
		if waiting != "" {
			add(Violation{InvPauseNotEnded, "", waiting, fmt.Sprintf(
				"key %s/%s paused for %d ms (answered %s) got no grant by %d, %d ms after its latest end %d, while %s (enqueued %s) waited",
				p.Queue, p.Key, p.DurationMs, p.End.Format(timeFmt), bound, pauseFlowBoundMs, latest, waiting, enqueuedOK[waiting].Format(timeFmt))})
		}
	}
	slices.Sort(f.PauseLatenessMs)
}

// checkOthersFlow: in [from, to] some other key of p's queue is granted,
// if an uncapped message (no key, or a key without a cap, never paused by
// the workload) waited through it: enqueued before from, first granted
// after to.
func checkOthersFlow(h *History, q QueueSpec, p PauseOp, from, to int64, leasesOf func(queue, key string) []keyedLease,
	keyOf map[string]string, enqueuedOK map[string]time.Time, firstGrant map[string]int64, add func(Violation)) {
	for _, k := range append([]string{""}, q.Keys...) {
		if k == p.Key {
			continue
		}
		for _, l := range leasesOf(q.Name, k) {
			if l.g >= from && l.g <= to {
				return // another key flowed
			}
		}
	}
	paused := map[string]bool{}
	for _, o := range h.Pauses {
		if o.Queue == q.Name {
			paused[o.Key] = true
		}
	}
	waiting := ""
	for pl, k := range keyOf {
		if t, ok := enqueuedOK[pl]; ok && k != p.Key && q.capOf(k) == 0 && !paused[k] && t.UnixMilli() < from {
			if g, granted := firstGrant[pl]; !granted || g > to {
				if waiting == "" || pl < waiting {
					waiting = pl
				}
			}
		}
	}
	if waiting != "" {
		add(Violation{InvPauseStoppedOthers, "", waiting, fmt.Sprintf(
			"while key %s/%s was paused (%d..%d, no fault near), no other key was granted anything; %s waited through it",
			q.Name, p.Key, from, to, waiting)})
	}
}

// faultNear reports whether a fault (widened as the attempt rules widen
// it) touches [from, to].
func faultNear(faults []FaultEvent, from, to int64) bool {
	for _, fe := range faults {
		if fe.Start.UnixMilli()-windowSlackMs <= to && fe.End.UnixMilli()+faultAfterExtraMs+endSlackMs >= from {
			return true
		}
	}
	return false
}

// checkLookups: a message's story lists every lease it had (the last 16
// ended attempts, the last 63 events), so GetMessage after a change of
// leader lists a lease the old leader granted: as an ended attempt with
// its number and consumer, or as a leased event naming both. An answer
// with every event slot full may have dropped it, and is not judged.
func checkLookups(h *History, f *FlowFigures, add func(Violation)) {
	for _, l := range h.Lookups {
		switch {
		case l.Outcome == OK:
		case l.Outcome == Failed && l.Code == "NotFound":
			f.Lookups++
			add(Violation{InvHistoryLostLease, l.MessageID, "", fmt.Sprintf(
				"after %s took over from %s, GetMessage(%s) found no message %s, which %s leased (attempt %d, token %s)",
				l.NewLeader, l.OldLeader, l.Queue, l.MessageID, l.Consumer, l.Attempt, l.Token)})
			continue
		default:
			continue
		}
		f.Lookups++
		found := slices.ContainsFunc(l.Attempts, func(a LookupAttempt) bool { return a.Attempt == l.Attempt && a.Consumer == l.Consumer })
		want := fmt.Sprintf("consumer %s, attempt %d,", l.Consumer, l.Attempt)
		found = found || slices.ContainsFunc(l.Leased, func(d string) bool { return strings.HasPrefix(d, want) })
		switch {
		case found:
			f.LookupsFound++
		case l.Events >= 64 || len(l.Attempts) >= 16:
			// the bounds may have dropped it
		default:
			add(Violation{InvHistoryLostLease, l.MessageID, "", fmt.Sprintf(
				"after %s took over from %s, GetMessage(%s) of %s (state %s) lists no lease of attempt %d to %s (token %s): attempts %v, leased events %q",
				l.NewLeader, l.OldLeader, l.AskedQueue, l.MessageID, l.State, l.Attempt, l.Consumer, l.Token, l.Attempts, l.Leased)})
		}
	}
}
