package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Invariants the checker holds (DESIGN.md, "Invariants the checker holds").
const (
	// An acknowledged enqueue (or any message ever delivered) ends neither
	// acked nor dead-lettered.
	InvLostWrite = "lost-write"
	// Acks of one message under two different leases both answered
	// success. (A retried ack of the same lease answers success again by
	// design, from log version 7: that settles nothing twice.)
	InvDoubleAck = "double-ack"
	// A message was delivered again after an ack of it succeeded.
	InvDeliveredAfterAck = "delivered-after-ack"
	// An ack succeeded with a token older than a later delivery's.
	InvStaleAck = "stale-ack-accepted"
	// A delivery from a work queue carried attempt > max_deliveries.
	InvOverMaxDeliveries = "over-max-deliveries"
	// A message was delivered while an earlier lease on it was still valid.
	InvTwoHolders = "two-holders"
	// Two deliveries of one message carried the same attempt number.
	InvAttemptReused = "attempt-reused"
	// One payload, enqueued with one dedup id, got two message ids.
	InvDuplicateEnqueue = "duplicate-enqueue"
	// No leader (or no usable cluster) within the bound after healing.
	InvNoRecovery = "no-recovery"
	// Replicas disagree (digests, counters) or a node gave no digest.
	InvReplicaDivergence = "replica-divergence"
	// Queues could not be drained after the faults stopped.
	InvDrainIncomplete = "drain-incomplete"
	// A node process exited on its own.
	InvNodeCrash = "node-crash"
	// The race detector reported a data race in a node.
	InvDataRace = "data-race"
	// A node repaired its counters or a replica (repairs.go) although no
	// fault was injected for it: the repair covers a bug.
	InvRepairWithoutFault = "repair-without-fault"
)

// clockSlackMs absorbs the millisecond rounding of broker timestamps when
// comparing a lease's end with the next grant.
const clockSlackMs = 20

// Violation is one broken invariant with what is needed to find it in the
// history.
type Violation struct {
	Invariant string `json:"invariant"`
	MessageID string `json:"message_id,omitempty"`
	Payload   string `json:"payload,omitempty"`
	Detail    string `json:"detail"`
}

// Report is the checker's verdict and the run's figures.
type Report struct {
	Seed  int64 `json:"seed"`
	Nodes int   `json:"nodes"`

	EnqueueCalls  int               `json:"enqueue_calls"`
	Deliveries    int               `json:"deliveries"`
	AckCalls      int               `json:"ack_calls"`
	NackCalls     int               `json:"nack_calls"`
	ExtendCalls   int               `json:"extend_calls"`
	StreamDrops   int               `json:"stream_drops"`
	FaultsByKind  map[FaultKind]int `json:"faults_by_kind"`
	FaultErrors   int               `json:"fault_errors"`
	AckedEnqueues int               `json:"acked_enqueues"` // payloads whose enqueue answered success
	FailedEnqueue int               `json:"failed_enqueues"`
	Lost          int               `json:"lost"`
	DuplicateAcks int               `json:"duplicate_acks"`
	Redeliveries  int               `json:"redeliveries"`  // deliveries with attempt > 1
	DeadLettered  int               `json:"dead_lettered"` // messages delivered from a DLQ
	// Payloads settled only by an ack whose answer was lost (and never
	// delivered again): consistent with the ack having applied.
	SettledByUnknownAck int `json:"settled_by_unknown_ack"`
	// Attempt numbers no consumer saw, and how many of them a fault or a
	// stream end may explain (the rest are violations).
	UnseenAttempts int `json:"unseen_attempts"`
	UnseenExcused  int `json:"unseen_attempts_excused"`
	// Flow are the flow-control figures (checker_flow.go).
	Flow FlowFigures `json:"flow"`

	UnknownEnqueues        int `json:"unknown_enqueues"` // payloads with no definite answer
	UnknownResolvedPresent int `json:"unknown_resolved_present"`
	UnknownResolvedAbsent  int `json:"unknown_resolved_absent"`

	LongestUnavailabilityMs int64 `json:"longest_write_unavailability_ms"`
	UnavailableFromMs       int64 `json:"unavailable_from_ms"` // offset into the workload
	RecoveryMs              int64 `json:"recovery_ms"`
	Consistent              bool  `json:"consistent"`

	// Linearizability is porcupine's verdict on the queues' config
	// registers (register.go).
	Linearizability *Linearizability `json:"linearizability,omitempty"`
	// Soak is the resource verdict of a soak (soak.go), nil otherwise.
	Soak *SoakVerdict `json:"soak,omitempty"`
	// The pause-read register: linearizable reads that answered, reads
	// refused or redirected, stale-header reads and how many of those
	// missed an acknowledged write (the window the pause opened).
	RegisterReads        int `json:"register_reads,omitempty"`
	RegisterReadsRefused int `json:"register_reads_refused,omitempty"`
	RegisterStaleReads   int `json:"register_stale_reads,omitempty"`
	RegisterStaleMissed  int `json:"register_stale_reads_missed,omitempty"`
	// Rejoins: nodes removed and started again; ClockedStarts: node starts
	// on a clock minutes off.
	Rejoins           int `json:"rejoins,omitempty"`
	RemovedFromConfig int `json:"removed_from_config,omitempty"`
	ClockedStarts     int `json:"clocked_starts,omitempty"`

	ViolationsByInvariant map[string]int `json:"violations_by_invariant"`
	Violations            []Violation    `json:"violations"`
}

// OK reports whether no invariant was broken.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// msgState gathers what happened to one message id.
type msgState struct {
	id         string
	payload    string
	deliveries []Delivery
	settles    []Settle
}

// Check holds the invariants over a finished history. It is pure: the
// same history always gives the same report.
func Check(h *History) *Report {
	h = onTrueClock(h)
	r := &Report{
		Seed: h.Seed, Nodes: h.Nodes,
		FaultsByKind:          map[FaultKind]int{},
		ViolationsByInvariant: map[string]int{},
	}
	add := func(v Violation) {
		r.Violations = append(r.Violations, v)
		r.ViolationsByInvariant[v.Invariant]++
	}
	maxDel := map[string]int32{}
	isDLQ := map[string]bool{}
	for _, q := range h.Queues {
		maxDel[q.Name] = q.MaxDeliveries
		isDLQ[q.DeadLetter] = true
	}
	r.EnqueueCalls = len(h.Enqueues)
	r.Deliveries = len(h.Deliveries)
	r.StreamDrops = len(h.Drops)
	for _, f := range h.Faults {
		r.FaultsByKind[f.Kind]++
		if f.Err != "" {
			r.FaultErrors++
		}
	}

	msgs := map[string]*msgState{}
	msg := func(id string) *msgState {
		m := msgs[id]
		if m == nil {
			m = &msgState{id: id}
			msgs[id] = m
		}
		return m
	}
	// Payload view: how its enqueues ended and which message ids carry it.
	type payloadState struct {
		ok, unknown bool
		ids         map[string]bool
		dedup       map[string]bool
	}
	payloads := map[string]*payloadState{}
	pay := func(p string) *payloadState {
		s := payloads[p]
		if s == nil {
			s = &payloadState{ids: map[string]bool{}, dedup: map[string]bool{}}
			payloads[p] = s
		}
		return s
	}
	for _, op := range h.Enqueues {
		for i, p := range op.Payloads {
			s := pay(p)
			if i < len(op.DedupIDs) {
				s.dedup[op.DedupIDs[i]] = true
			}
			switch op.Outcome {
			case OK:
				s.ok = true
				if i < len(op.IDs) {
					s.ids[op.IDs[i]] = true
					msg(op.IDs[i]).payload = p
				}
			case Unknown:
				s.unknown = true
			}
		}
	}
	for _, d := range h.Deliveries {
		m := msg(d.MessageID)
		m.deliveries = append(m.deliveries, d)
		if m.payload == "" {
			m.payload = d.Payload
		}
		pay(d.Payload).ids[d.MessageID] = true
		if d.Attempt > 1 {
			r.Redeliveries++
		}
		if lim, ok := maxDel[d.Queue]; ok && lim > 0 && d.Attempt > lim {
			add(Violation{InvOverMaxDeliveries, d.MessageID, d.Payload,
				fmt.Sprintf("attempt %d > max_deliveries %d in %s (consumer %s, token %s)", d.Attempt, lim, d.Queue, d.Consumer, d.Token)})
		}
	}
	for _, s := range h.Settles {
		switch s.Kind {
		case Ack:
			r.AckCalls++
		case Nack:
			r.NackCalls++
		case Extend:
			r.ExtendCalls++
		}
		msg(s.MessageID).settles = append(msg(s.MessageID).settles, s)
	}
	drops := map[int64]time.Time{}
	for _, d := range h.Drops {
		drops[d.Stream] = d.At
	}
	streams := streamGrants{}
	for _, d := range h.Deliveries {
		streams[d.Stream] = max(streams[d.Stream], d.grantMs())
	}

	// Per message: acks, holders, attempts.
	ids := make([]string, 0, len(msgs))
	for id := range msgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	terminal := map[string]bool{}     // message acked or dead-lettered
	unknownAcked := map[string]bool{} // last lease's ack got no answer
	for _, id := range ids {
		m := msgs[id]
		checkMessage(m, isDLQ, drops, streams, add)
		var okAcks []Settle // one per lease: a retry of the same lease settles nothing twice
		for _, s := range m.settles {
			if s.Kind == Ack && s.Outcome == OK && !slices.ContainsFunc(okAcks, func(o Settle) bool { return o.Token == s.Token }) {
				okAcks = append(okAcks, s)
			}
		}
		if len(okAcks) > 1 {
			r.DuplicateAcks += len(okAcks) - 1
			add(Violation{InvDoubleAck, id, m.payload, fmt.Sprintf("%d successful acks: %s", len(okAcks), describeSettles(okAcks))})
		}
		if len(okAcks) > 0 {
			terminal[id] = true
		}
		for _, d := range m.deliveries {
			if isDLQ[d.Queue] {
				terminal[id] = true
				r.DeadLettered++
				break
			}
		}
		if !terminal[id] && len(m.deliveries) > 0 {
			last := lastDelivery(m.deliveries)
			for _, s := range m.settles {
				if s.Kind == Ack && s.Outcome == Unknown && s.Token == last.Token {
					unknownAcked[id] = true
				}
			}
		}
	}

	checkAttemptOrder(h, add)
	r.UnseenAttempts, r.UnseenExcused = checkUnseenAttempts(h, msgs, ids, add)
	r.Flow = checkFlow(h, drops, streams, add)

	// Per payload: lost writes, duplicates, unknown outcomes.
	plist := make([]string, 0, len(payloads))
	for p := range payloads {
		plist = append(plist, p)
	}
	sort.Strings(plist)
	for _, p := range plist {
		s := payloads[p]
		present := len(s.ids) > 0
		switch {
		case s.ok:
			r.AckedEnqueues++
		case s.unknown:
			r.UnknownEnqueues++
			if present {
				r.UnknownResolvedPresent++
			} else {
				r.UnknownResolvedAbsent++
			}
		default:
			if !present {
				r.FailedEnqueue++
			}
		}
		if len(s.ids) > 1 && len(s.dedup) <= 1 {
			add(Violation{InvDuplicateEnqueue, "", p, fmt.Sprintf("message ids %v for one dedup id", sortedKeys(s.ids))})
		}
		if !s.ok && !present {
			continue // never known to exist
		}
		done, byUnknown := false, false
		for id := range s.ids {
			done = done || terminal[id]
			byUnknown = byUnknown || unknownAcked[id]
		}
		switch {
		case done:
		case byUnknown:
			r.SettledByUnknownAck++
		default:
			r.Lost++
			add(Violation{InvLostWrite, firstKey(s.ids), p, lostDetail(s.ok, s.ids, msgs)})
		}
	}

	r.LongestUnavailabilityMs, r.UnavailableFromMs = longestGap(h)
	if !h.Recovery.OK {
		add(Violation{Invariant: InvNoRecovery, Detail: fmt.Sprintf("no leader after healing: %s", h.Recovery.Err)})
	} else {
		r.RecoveryMs = h.Recovery.LeaderAt.Sub(h.Recovery.HealedAt).Milliseconds()
	}
	if d := divergence(h); d != "" {
		add(Violation{Invariant: InvReplicaDivergence, Detail: d})
	} else {
		r.Consistent = true
	}
	if !h.Drain.Complete {
		add(Violation{Invariant: InvDrainIncomplete, Detail: h.Drain.Leftover})
	}
	for _, c := range h.Crashes {
		add(Violation{Invariant: InvNodeCrash, Detail: fmt.Sprintf("%s exited (%s) at %s", c.Node, c.Status, c.At.Format(time.RFC3339Nano))})
	}
	for _, race := range h.Drain.DataRaces {
		add(Violation{Invariant: InvDataRace, Detail: race})
	}
	checkRepairs(h, add)
	// The independent check: porcupine over the config registers.
	r.Linearizability = CheckLinearizable(h.Registers, linearizabilityBudget)
	if v := r.Linearizability.Violation(); v != nil {
		add(*v)
	}
	checkReads(h, r, add)
	checkRejoins(h, r, add)
	return r
}

// checkMessage holds the per-message lease invariants: one valid holder at
// a time, no delivery after a successful ack, no stale ack accepted,
// distinct attempt numbers.
func checkMessage(m *msgState, isDLQ map[string]bool, drops map[int64]time.Time, streams streamGrants, add func(Violation)) {
	ds := slices.Clone(m.deliveries)
	slices.SortStableFunc(ds, func(a, b Delivery) int {
		return cmp.Or(cmp.Compare(a.Attempt, b.Attempt), a.Recv.Compare(b.Recv))
	})
	byToken := map[string]Delivery{}
	for _, d := range ds {
		if prev, ok := byToken[d.Token]; ok {
			if prev.Consumer != d.Consumer {
				add(Violation{InvTwoHolders, m.id, m.payload, fmt.Sprintf("token %s delivered to %s and %s", d.Token, prev.Consumer, d.Consumer)})
			}
			continue
		}
		byToken[d.Token] = d
	}
	uniq := make([]Delivery, 0, len(byToken))
	seen := map[string]bool{}
	for _, d := range ds {
		if !seen[d.Token] {
			seen[d.Token] = true
			uniq = append(uniq, d)
		}
	}
	for i := 1; i < len(uniq); i++ {
		if uniq[i].Attempt == uniq[i-1].Attempt && !isDLQ[uniq[i].Queue] && !isDLQ[uniq[i-1].Queue] {
			add(Violation{InvAttemptReused, m.id, m.payload, fmt.Sprintf("attempt %d carried by tokens %s (%s) and %s (%s)",
				uniq[i].Attempt, uniq[i-1].Token, uniq[i-1].Consumer, uniq[i].Token, uniq[i].Consumer)})
		}
	}
	// Two leases overlap for sure when the later was granted while the
	// earlier was (a) used successfully afterwards (an extension or nack
	// that started after the grant), or (b) unexpired, unsettled and on a
	// stream that was still open: the stream got another delivery granted
	// no earlier. A stream that closes releases its leases, so without (b)'s
	// evidence the earlier lease may have ended when its stream did.
	// Settles and drops count from their start, the earliest moment they
	// may have taken effect, so only overlaps that certainly happened are
	// flagged.
	for i, a := range uniq {
		end := validUntilMs(a, m.settles, drops)
		for _, b := range uniq[i+1:] {
			g := b.grantMs()
			if s, ok := usedAfter(a, m.settles, g+clockSlackMs); ok {
				add(Violation{InvTwoHolders, m.id, m.payload, fmt.Sprintf(
					"attempt %d (token %s) granted to %s at %d; the %s of attempt %d (token %s, %s) started after it, at %d, and succeeded",
					b.Attempt, b.Token, b.Consumer, g, s.Kind, a.Attempt, a.Token, a.Consumer, s.Start.UnixMilli())})
				continue
			}
			if g+clockSlackMs < end && streams.openAt(a.Stream, g) {
				add(Violation{InvTwoHolders, m.id, m.payload, fmt.Sprintf(
					"attempt %d (token %s) granted to %s at %d while attempt %d (token %s, %s, stream %d still open) was valid until %d (%d ms overlap)",
					b.Attempt, b.Token, b.Consumer, g, a.Attempt, a.Token, a.Consumer, a.Stream, end, end-g)})
			}
		}
	}
	for _, s := range m.settles {
		if s.Kind != Ack || s.Outcome != OK {
			continue
		}
		acked, ok := byToken[s.Token]
		if !ok {
			continue
		}
		for _, d := range uniq {
			if d.Attempt <= acked.Attempt || d.Token == acked.Token {
				continue
			}
			inv, when := InvStaleAck, "before"
			if d.Recv.After(s.End) {
				inv, when = InvDeliveredAfterAck, "after"
			}
			add(Violation{inv, m.id, m.payload, fmt.Sprintf(
				"ack of attempt %d (token %s, %s) succeeded [%s..%s]; attempt %d (token %s) delivered to %s at %s, %s it",
				acked.Attempt, acked.Token, acked.Consumer, s.Start.Format(timeFmt), s.End.Format(timeFmt),
				d.Attempt, d.Token, d.Consumer, d.Recv.Format(timeFmt), when)})
		}
	}
}

const timeFmt = "15:04:05.000"

// validUntilMs is the earliest moment a lease may have ended (ms, Unix):
// its deadline as extended by successful extensions, the start of an ack
// or nack that succeeded or got no answer, the drop of its stream.
func validUntilMs(d Delivery, settles []Settle, drops map[int64]time.Time) int64 {
	end := d.DeadlineMs
	for _, s := range settles {
		if s.Token != d.Token || s.Outcome != OK {
			continue
		}
		if s.Kind == Extend && s.NewDeadlineMs > end {
			end = s.NewDeadlineMs
		}
	}
	// An ack or nack without an answer may have applied: it may have ended
	// the lease as soon as it was sent.
	for _, s := range settles {
		if s.Token == d.Token && s.Outcome != Failed && (s.Kind == Ack || s.Kind == Nack) {
			end = min(end, s.Start.UnixMilli())
		}
	}
	if at, ok := drops[d.Stream]; ok && !at.Before(d.Recv) {
		end = min(end, at.UnixMilli())
	}
	return end
}

// usedAfter finds a successful extension or nack of d's lease that
// started after ms (acks are the stale-ack rule's).
//
// A successful settle may be the retry of an earlier one of the same kind
// and token whose answer was lost: from log version 7 the broker answers
// such a retry OK from its record of recent outcomes, and the lease ended
// when the first call applied. So the use counts from the earliest start
// of any call of that kind and token that may have taken effect.
func usedAfter(d Delivery, settles []Settle, ms int64) (Settle, bool) {
	for _, s := range settles {
		if s.Token == d.Token && s.Outcome == OK && s.Kind != Ack && mayHaveTakenEffectFrom(s, settles) > ms {
			return s, true
		}
	}
	return Settle{}, false
}

// mayHaveTakenEffectFrom is the earliest start (ms) of s or of a call of
// the same kind and token, before s, whose outcome is unknown.
func mayHaveTakenEffectFrom(s Settle, settles []Settle) int64 {
	from := s.Start.UnixMilli()
	for _, o := range settles {
		if o.Token == s.Token && o.Kind == s.Kind && o.Outcome == Unknown && o.Start.Before(s.Start) && o.Start.UnixMilli() < from {
			from = o.Start.UnixMilli()
		}
	}
	return from
}

// streamGrants is the latest grant (ms) seen on each stream.
type streamGrants map[int64]int64

// openAt reports whether the stream certainly was open at ms: it got a
// delivery granted then or later.
func (sg streamGrants) openAt(stream, ms int64) bool { return sg[stream] >= ms }

func lastDelivery(ds []Delivery) Delivery {
	last := ds[0]
	for _, d := range ds[1:] {
		if d.Attempt > last.Attempt || (d.Attempt == last.Attempt && d.Recv.After(last.Recv)) {
			last = d
		}
	}
	return last
}

// longestGap is the longest stretch of the workload without a successful
// enqueue, and where it began.
func longestGap(h *History) (gapMs, fromMs int64) {
	if h.WorkloadStart.IsZero() || !h.WorkloadEnd.After(h.WorkloadStart) {
		return 0, 0
	}
	var ends []time.Time
	for _, op := range h.Enqueues {
		if op.Outcome == OK && !op.End.Before(h.WorkloadStart) && !op.End.After(h.WorkloadEnd) {
			ends = append(ends, op.End)
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	prev := h.WorkloadStart
	var best time.Duration
	var bestFrom time.Time
	for _, e := range append(ends, h.WorkloadEnd) {
		if g := e.Sub(prev); g > best {
			best, bestFrom = g, prev
		}
		prev = e
	}
	return best.Milliseconds(), bestFrom.Sub(h.WorkloadStart).Milliseconds()
}

// divergence says what is wrong with the final Verify, or "".
func divergence(h *History) string {
	v := h.Verify
	if v.Err != "" {
		return "verify failed: " + v.Err
	}
	if len(v.Nodes) != h.Nodes {
		return fmt.Sprintf("verify answered for %d nodes, want %d", len(v.Nodes), h.Nodes)
	}
	for _, n := range v.Nodes {
		switch {
		case n.Digest == "":
			return fmt.Sprintf("node %s has no digest (%s)", n.ID, n.Err)
		case !n.CountersOK:
			return fmt.Sprintf("node %s: counters differ from its structures", n.ID)
		case n.Digest != v.Nodes[0].Digest:
			return fmt.Sprintf("digests differ: %s=%s@%d, %s=%s@%d", v.Nodes[0].ID, v.Nodes[0].Digest, v.Nodes[0].AppliedIndex, n.ID, n.Digest, n.AppliedIndex)
		}
	}
	if !v.Consistent {
		return "verify says inconsistent"
	}
	return ""
}

func lostDetail(ok bool, ids map[string]bool, msgs map[string]*msgState) string {
	how := "enqueue acknowledged"
	if !ok {
		how = "enqueue outcome unknown but delivered"
	}
	var parts []string
	for _, id := range sortedKeys(ids) {
		m := msgs[id]
		if m == nil {
			parts = append(parts, id+": never delivered")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %d deliveries, settles %s", id, len(m.deliveries), describeSettles(m.settles)))
	}
	return fmt.Sprintf("%s; never acked nor dead-lettered (%v)", how, parts)
}

func describeSettles(ss []Settle) string {
	out := "["
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s/%s/%s@%s", s.Kind, s.Token, s.Outcome, s.Start.Format(timeFmt))
		if s.Code != "" {
			out += "(" + s.Code + ")"
		}
	}
	return out + "]"
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func firstKey(m map[string]bool) string {
	if k := sortedKeys(m); len(k) > 0 {
		return k[0]
	}
	return ""
}
