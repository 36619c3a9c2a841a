package chaos

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// t0 anchors the synthetic histories; offsets are in milliseconds.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const vt = 3000 // visibility timeout of the synthetic streams, ms

// deliver is a delivery received at recvMs whose lease was granted at
// grantMs (by the leader's clock).
func deliver(consumer, queue, id, payload, token string, attempt int32, grantMs, recvMs int64) Delivery {
	return Delivery{Consumer: consumer, Stream: streamOf(consumer), Queue: queue, MessageID: id, Payload: payload,
		Token: token, Attempt: attempt, DeadlineMs: at(grantMs).UnixMilli() + vt, VisibilityMs: vt, Recv: at(recvMs)}
}

// streamOf gives each synthetic consumer one stream ("c1" = 1).
func streamOf(consumer string) int64 { return int64(consumer[len(consumer)-1] - '0') }

func settle(kind SettleKind, id, token string, out Outcome, startMs, endMs int64) Settle {
	return Settle{Kind: kind, Consumer: "c1", Queue: "q", MessageID: id, Token: token, Outcome: out, Start: at(startMs), End: at(endMs)}
}

func enq(payload string, out Outcome, startMs, endMs int64, ids ...string) EnqueueOp {
	return EnqueueOp{Producer: "p1", Queue: "q", Payloads: []string{payload}, DedupIDs: []string{"d-" + payload},
		Start: at(startMs), End: at(endMs), Outcome: out, IDs: ids}
}

// cleanHistory is a run in which every invariant holds, and which touches
// each rule: a plain ack, a nack then ack, an expired lease redelivered
// after its deadline with the late ack refused, a dead-lettered message,
// and enqueues that answered ok, failed and unknown (present and absent).
func cleanHistory() *History {
	h := &History{
		Seed: 42, Nodes: 3,
		Queues:        []QueueSpec{{Name: "q", DeadLetter: "q.dlq", MaxDeliveries: 3}},
		WorkloadStart: at(0), WorkloadEnd: at(20000),
		Enqueues: []EnqueueOp{
			enq("a", OK, 0, 10, "m1"),
			enq("b", OK, 100, 110, "m2"),
			enq("c", OK, 200, 210, "m3"),
			enq("d", OK, 300, 310, "m4"),
			enq("e", Unknown, 400, 5000),
			enq("f", Unknown, 500, 5000),
			enq("g", Failed, 600, 610),
			enq("h", OK, 700, 710, "m7"),
		},
		Deliveries: []Delivery{
			deliver("c1", "q", "m1", "a", "t1", 1, 20, 21),
			deliver("c1", "q", "m2", "b", "t2", 1, 120, 121),
			deliver("c2", "q", "m2", "b", "t3", 2, 600, 601),
			deliver("c1", "q", "m3", "c", "t4", 1, 220, 221),
			deliver("c2", "q", "m3", "c", "t5", 2, 3300, 3301), // after t4's deadline (3220)
			deliver("c1", "q", "m4", "d", "t6", 1, 320, 321),
			deliver("c3", "q.dlq", "m4", "d", "t7", 2, 900, 901),
			deliver("c1", "q", "m5", "e", "t8", 1, 5100, 5101),
			deliver("c1", "q", "m7", "h", "t9", 1, 720, 721),
			deliver("c2", "q", "m7", "h", "t10", 2, 1100, 1101), // after t9's stream was dropped at 1000
		},
		Settles: []Settle{
			settle(Ack, "m1", "t1", OK, 30, 40),
			settle(Nack, "m2", "t2", OK, 500, 510),
			settle(Ack, "m2", "t3", OK, 700, 710),
			settle(Ack, "m3", "t4", Failed, 4000, 4010),
			settle(Ack, "m3", "t5", OK, 3400, 3410),
			{Kind: Nack, Consumer: "c1", Queue: "q", MessageID: "m4", Token: "t6", DeadLetter: true, Outcome: OK, Start: at(800), End: at(810)},
			settle(Ack, "m4", "t7", OK, 1000, 1010),
			settle(Ack, "m5", "t8", OK, 5200, 5210),
			settle(Ack, "m7", "t10", OK, 1200, 1210),
		},
		Drops:    []StreamDrop{{Consumer: "c1", Stream: droppedStream, At: at(1000)}},
		Faults:   []FaultEvent{{Kind: KillLeader, Targets: []string{"n1"}, Start: at(1000), End: at(3000)}},
		Drain:    DrainResult{Complete: true},
		Recovery: Recovery{HealedAt: at(20000), LeaderAt: at(21500), Leader: "n2", OK: true},
		Verify: VerifyResult{Consistent: true, Nodes: []NodeDigest{
			{ID: "n1", AppliedIndex: 99, Digest: "abc", CountersOK: true},
			{ID: "n2", AppliedIndex: 99, Digest: "abc", CountersOK: true},
			{ID: "n3", AppliedIndex: 99, Digest: "abc", CountersOK: true},
		}},
	}
	// m7's first lease was on a stream the consumer dropped at 1000.
	for i := range h.Deliveries {
		if h.Deliveries[i].Token == "t9" {
			h.Deliveries[i].Stream = droppedStream
		}
	}
	return h
}

const droppedStream = 100

func TestCheckerCleanHistoryPasses(t *testing.T) {
	h := cleanHistory()
	r := Check(h)
	if !r.OK() {
		t.Fatalf("clean history flagged: %+v", r.Violations)
	}
	want := Report{AckedEnqueues: 5, UnknownEnqueues: 2, UnknownResolvedPresent: 1, UnknownResolvedAbsent: 1,
		FailedEnqueue: 1, Redeliveries: 4, DeadLettered: 1, RecoveryMs: 1500, Consistent: true}
	if r.AckedEnqueues != want.AckedEnqueues || r.UnknownEnqueues != want.UnknownEnqueues ||
		r.UnknownResolvedPresent != want.UnknownResolvedPresent || r.UnknownResolvedAbsent != want.UnknownResolvedAbsent ||
		r.FailedEnqueue != want.FailedEnqueue || r.Redeliveries != want.Redeliveries || r.DeadLettered != want.DeadLettered ||
		r.RecoveryMs != want.RecoveryMs || !r.Consistent {
		t.Fatalf("figures: %+v", r)
	}
	if r.FaultsByKind[KillLeader] != 1 {
		t.Fatalf("faults by kind: %v", r.FaultsByKind)
	}
	// The longest stretch without a successful enqueue: from 710 to the end.
	if r.LongestUnavailabilityMs != 20000-710 || r.UnavailableFromMs != 710 {
		t.Fatalf("unavailability %d ms from %d", r.LongestUnavailabilityMs, r.UnavailableFromMs)
	}
}

// TestCheckerRetriedAckIsNoDoubleAck: an ack retried after a lost answer
// (same message, same lease) answers success again; that is not two
// settles.
func TestCheckerRetriedAckIsNoDoubleAck(t *testing.T) {
	h := cleanHistory()
	var first Settle
	for _, s := range h.Settles {
		if s.Kind == Ack && s.Outcome == OK {
			first = s
			break
		}
	}
	retry := first
	retry.Start, retry.End = first.End.Add(10*time.Millisecond), first.End.Add(20*time.Millisecond)
	h.Settles = append(h.Settles, retry)
	if r := Check(h); !r.OK() {
		t.Fatalf("a retried ack of one lease flagged: %+v", r.Violations)
	}
}

// TestCheckerFlagsViolations breaks one invariant at a time in the clean
// history and expects the checker to name it.
func TestCheckerFlagsViolations(t *testing.T) {
	cases := []struct {
		name   string
		want   string
		mutate func(h *History)
	}{
		{"lost write", InvLostWrite, func(h *History) {
			h.Settles = slices.DeleteFunc(h.Settles, func(s Settle) bool { return s.Token == "t1" })
		}},
		{"acked enqueue never delivered", InvLostWrite, func(h *History) {
			h.Enqueues = append(h.Enqueues, enq("z", OK, 900, 910, "m9"))
		}},
		{"counter repaired with no fault injected", InvRepairWithoutFault, func(h *History) {
			h.Repairs = RepairsInLog("n2", `time=2026-11-30T18:00:00Z level=WARN msg="queue counters disagreed with the queue's messages; recomputed them (a repair is a bug report)" queue=q0`)
		}},
		{"replica repaired with no fault injected", InvRepairWithoutFault, func(h *History) {
			h.Repairs = RepairsInMetrics("n1", "raftq_replica_divergence_total{node=\"n3\"} 1\n")
		}},
		{"double ack", InvDoubleAck, func(h *History) {
			// Under two leases: the nacked one's ack succeeding too.
			h.Settles = append(h.Settles, settle(Ack, "m2", "t2", OK, 800, 810))
		}},
		{"delivery after ack", InvDeliveredAfterAck, func(h *History) {
			h.Deliveries = append(h.Deliveries, deliver("c2", "q", "m1", "a", "t99", 2, 3100, 3101))
		}},
		{"stale ack accepted", InvStaleAck, func(h *History) {
			h.Settles = append(h.Settles, settle(Ack, "m3", "t4", OK, 3500, 3510))
		}},
		{"attempt over max_deliveries", InvOverMaxDeliveries, func(h *History) {
			h.Deliveries = append(h.Deliveries, deliver("c2", "q", "m5", "e", "t98", 4, 9000, 9001))
		}},
		{"two valid holders, first stream still open", InvTwoHolders, func(h *History) {
			for i := range h.Deliveries {
				if h.Deliveries[i].Token == "t5" { // granted 1s before t4's deadline
					h.Deliveries[i].DeadlineMs -= 1000
				}
			}
			// c1's stream got another lease after that: it was open.
			h.Deliveries = append(h.Deliveries, deliver("c1", "q", "m8", "i", "t20", 1, 2400, 2401))
			h.Enqueues = append(h.Enqueues, enq("i", OK, 2300, 2310, "m8"))
			h.Settles = append(h.Settles, settle(Ack, "m8", "t20", OK, 2500, 2510))
		}},
		{"two valid holders, first lease extended after", InvTwoHolders, func(h *History) {
			h.Settles = append(h.Settles, Settle{Kind: Extend, Consumer: "c1", Queue: "q", MessageID: "m3", Token: "t4",
				Outcome: OK, Start: at(3350), End: at(3360), NewDeadlineMs: at(6350).UnixMilli()})
		}},
		{"one token, two consumers", InvTwoHolders, func(h *History) {
			h.Deliveries = append(h.Deliveries, deliver("c9", "q", "m1", "a", "t1", 1, 20, 22))
		}},
		{"lease still held after nack start is fine, before is not", InvTwoHolders, func(h *History) {
			for i := range h.Settles {
				if h.Settles[i].Token == "t2" { // the nack now starts after t3's grant
					h.Settles[i].Start, h.Settles[i].End = at(650), at(660)
				}
			}
		}},
		{"attempt reused", InvAttemptReused, func(h *History) {
			for i := range h.Deliveries {
				if h.Deliveries[i].Token == "t5" {
					h.Deliveries[i].Attempt = 1
				}
			}
		}},
		{"duplicate enqueue", InvDuplicateEnqueue, func(h *History) {
			h.Enqueues = append(h.Enqueues, EnqueueOp{Producer: "p1", Queue: "q", Payloads: []string{"a"}, DedupIDs: []string{"d-a"},
				Retry: true, Start: at(50), End: at(60), Outcome: OK, IDs: []string{"m1bis"}})
			h.Deliveries = append(h.Deliveries, deliver("c1", "q", "m1bis", "a", "t97", 1, 70, 71))
			h.Settles = append(h.Settles, settle(Ack, "m1bis", "t97", OK, 80, 90))
		}},
		{"digest mismatch", InvReplicaDivergence, func(h *History) { h.Verify.Nodes[2].Digest = "abd" }},
		{"empty digest", InvReplicaDivergence, func(h *History) { h.Verify.Nodes[1].Digest = "" }},
		{"node missing from verify", InvReplicaDivergence, func(h *History) { h.Verify.Nodes = h.Verify.Nodes[:2] }},
		{"counters drift", InvReplicaDivergence, func(h *History) { h.Verify.Nodes[0].CountersOK = false }},
		{"no leader after healing", InvNoRecovery, func(h *History) { h.Recovery = Recovery{HealedAt: at(20000), Err: "timeout"} }},
		{"drain incomplete", InvDrainIncomplete, func(h *History) { h.Drain = DrainResult{Leftover: "q: ready=3"} }},
		{"node crash", InvNodeCrash, func(h *History) { h.Crashes = []NodeCrash{{Node: "n2", Status: "exit status 2"}} }},
		{"data race", InvDataRace, func(h *History) { h.Drain.DataRaces = []string{"n1: WARNING: DATA RACE"} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanHistory()
			tc.mutate(h)
			r := Check(h)
			if r.ViolationsByInvariant[tc.want] == 0 {
				t.Fatalf("%s not flagged; violations: %+v", tc.want, r.Violations)
			}
		})
	}
}

// TestCheckerUnknownAckSettles: a message whose last ack got no answer and
// which never came back counts as settled by that ack, not as lost.
func TestCheckerUnknownAckSettles(t *testing.T) {
	h := cleanHistory()
	for i := range h.Settles {
		if h.Settles[i].Token == "t1" {
			h.Settles[i].Outcome = Unknown
		}
	}
	r := Check(h)
	if !r.OK() || r.SettledByUnknownAck != 1 {
		t.Fatalf("settled by unknown ack = %d, violations %+v", r.SettledByUnknownAck, r.Violations)
	}
}

// TestHistoryRoundTrip: a history written as JSON reads back to the same
// verdict (the replay path for a failed run).
func TestHistoryRoundTrip(t *testing.T) {
	h := cleanHistory()
	h.Verify.Nodes[2].Digest = "zzz"
	path := filepath.Join(t.TempDir(), "history.json")
	if err := WriteJSON(path, h); err != nil {
		t.Fatal(err)
	}
	back, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := Check(h), Check(back)
	if len(a.Violations) != len(b.Violations) || a.Violations[0] != b.Violations[0] {
		t.Fatalf("verdicts differ:\n%+v\n%+v", a.Violations, b.Violations)
	}
}

func TestPlanIsSeededAndCoversEveryKind(t *testing.T) {
	a := Plan(7, 5, AllFaults, 2*time.Minute, false)
	b := Plan(7, 5, AllFaults, 2*time.Minute, false)
	if len(a) != len(b) {
		t.Fatalf("plans differ in length: %d vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			t.Fatalf("step %d differs: %s vs %s", i, a[i], b[i])
		}
	}
	seen := map[FaultKind]bool{}
	for _, s := range a[:len(AllFaults)] {
		seen[s.Kind] = true
	}
	if len(seen) != len(AllFaults) {
		t.Fatalf("first cycle covers %v", seen)
	}
	if c := Plan(8, 5, AllFaults, 2*time.Minute, false); c[0].String() == a[0].String() && c[1].String() == a[1].String() {
		t.Fatalf("different seeds gave the same start: %s", c[0])
	}
	for _, s := range Plan(7, 3, AllFaults, 0, true) {
		if (s.Kind == Pause || s.Kind == PauseRead) && s.Hold <= time.Second {
			t.Fatalf("%s %v not longer than the election timeout", s.Kind, s.Hold)
		}
	}
	for seed := int64(0); seed < 50; seed++ {
		for _, s := range Plan(seed, 3, []FaultKind{ClockJump}, 0, true) {
			if abs(s.Offset) < time.Minute || abs(s.Offset2) < time.Minute || (s.Offset > 0) == (s.Offset2 > 0) {
				t.Fatalf("clock jump %v, %v: want minutes, one forward and one back", s.Offset, s.Offset2)
			}
		}
	}
}

// TestCheckerUnansweredNackMayEndLease: a nack that got no answer may
// have applied when it was sent, so a re-grant right after is no overlap
// (seen in a campaign: the nack's forwarding node was cut off).
func TestCheckerUnansweredNackMayEndLease(t *testing.T) {
	h := cleanHistory()
	for i := range h.Settles {
		if h.Settles[i].Token == "t2" { // nack of m2's attempt 1 (granted 120, deadline 3120)
			h.Settles[i].Outcome, h.Settles[i].Start, h.Settles[i].End = Unknown, at(500), at(3500)
		}
	}
	h.Settles = append(h.Settles, settle(Nack, "m2", "t2", Failed, 3600, 3610))
	if r := Check(h); !r.OK() {
		t.Fatalf("flagged: %+v", r.Violations)
	}
}

// TestCheckerOverlapNeedsEvidence: a lease re-granted before the earlier
// one's deadline is no violation when the earlier lease's stream may have
// closed (closing releases), i.e. it got nothing granted since.
func TestCheckerOverlapNeedsEvidence(t *testing.T) {
	h := cleanHistory()
	for i := range h.Deliveries {
		switch h.Deliveries[i].Token {
		case "t4": // alone on its stream
			h.Deliveries[i].Consumer, h.Deliveries[i].Stream = "c4", streamOf("c4")
		case "t5":
			h.Deliveries[i].DeadlineMs -= 1000
		}
	}
	if r := Check(h); !r.OK() {
		t.Fatalf("flagged without evidence: %+v", r.Violations)
	}
}

// TestRecheckHistory re-runs the checker on a history a failed run wrote
// (RAFTQ_CHAOS_HISTORY=path), e.g. after changing the checker.
func TestRecheckHistory(t *testing.T) {
	path := os.Getenv("RAFTQ_CHAOS_HISTORY")
	if path == "" {
		t.Skip("set RAFTQ_CHAOS_HISTORY to a history JSON file to re-check it")
	}
	h, err := ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h)
	t.Logf("\n%s", r.Table())
	for _, v := range r.Violations {
		t.Errorf("[%s] msg=%s payload=%s: %s", v.Invariant, v.MessageID, v.Payload, v.Detail)
	}
}

// TestRepairEvidence: the scanners find repair lines and non-zero repair
// series, and nothing in a clean node's log and metrics.
func TestRepairEvidence(t *testing.T) {
	cleanLog := "level=INFO msg=\"counter audit: recount committed\"\nlevel=INFO msg=\"node started\"\n"
	if got := RepairsInLog("n1", cleanLog); len(got) != 0 {
		t.Fatalf("clean log: %v", got)
	}
	cleanMetrics := "# HELP raftq_replica_diverged x\n# TYPE raftq_replica_diverged gauge\nraftq_replica_diverged 0\nraftq_audit_queues_recounted_total 40\n"
	if got := RepairsInMetrics("n1", cleanMetrics); len(got) != 0 {
		t.Fatalf("clean metrics: %v", got)
	}
	log := cleanLog + "level=ERROR msg=\"replica check: a replica's state differs from the leader's at a checkpoint; it stops serving reads until repaired\" node=n3\n" +
		"level=WARN msg=\"node byte total disagreed with the queues' byte counters; recomputed it (a repair is a bug report)\"\n"
	if got := RepairsInLog("n1", log); len(got) != 2 {
		t.Fatalf("log repairs: %v, want 2", got)
	}
	m := cleanMetrics + "raftq_counter_repairs_total{queue=\"q0\"} 2\nraftq_replica_diverged 1\n"
	if got := RepairsInMetrics("n1", m); len(got) != 2 {
		t.Fatalf("metric repairs: %v, want 2", got)
	}
}

// A nack retried after its first answer was lost answers OK from the
// broker's record of recent outcomes (log version 7): the lease ended
// when the first call applied, so a grant between the two calls is no
// second holder. The same late nack without the earlier call still is
// (TestCheckerFlagsViolations).
func TestCheckerRetriedNackIsNoSecondHolder(t *testing.T) {
	h := cleanHistory()
	i := slices.IndexFunc(h.Settles, func(s Settle) bool { return s.Token == "t2" && s.Kind == Nack })
	if i < 0 {
		t.Fatal("clean history has no nack of t2")
	}
	first := h.Settles[i]
	first.Outcome = Unknown
	h.Settles[i].Start, h.Settles[i].End = at(650), at(660) // the retry, after t3's grant
	h.Settles = append(h.Settles, first)
	if r := Check(h); !r.OK() {
		t.Fatalf("a retried nack flagged: %+v", r.Violations)
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
