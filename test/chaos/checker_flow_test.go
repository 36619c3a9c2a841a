package chaos

import (
	"slices"
	"testing"
)

// keyed is a delivery from the keyed queue "k", granted by node.
func keyed(consumer, id, payload, token string, attempt int32, grantMs int64, node string) Delivery {
	d := deliver(consumer, "k", id, payload, token, attempt, grantMs, grantMs+1)
	d.Node = node
	return d
}

func enqk(payload, key string, startMs int64, id string) EnqueueOp {
	return EnqueueOp{Producer: "p1", Queue: "k", Payloads: []string{payload}, DedupIDs: []string{"d-" + payload},
		Start: at(startMs), End: at(startMs + 10), Outcome: OK, IDs: []string{id}, Keys: []string{key}}
}

// flowHistory is the clean history with a keyed queue "k" in which every
// flow rule holds: key "o" (cap 1) takes its messages in order, its head
// nacked and granted again before the next, the third from a new leader;
// key "a" (cap 2) never has more than two in flight (a3 is granted after
// a1's ack began); key "o" is paused for 4 s with no fault near, "a" and
// the uncapped u2 flow meanwhile, and "o" flows again 100 ms after the
// end, from another leader; a GetMessage after the leader change lists
// n3's lease.
func flowHistory() *History {
	h := cleanHistory()
	h.WorkloadEnd = at(40000)
	h.Queues = append(h.Queues, QueueSpec{Name: "k", DeadLetter: "k.dlq", MaxDeliveries: 5,
		Keys: []string{"a", "o"}, ConcurrencyLimit: 2, ConcurrencyLimits: map[string]int32{"o": 1}})
	h.Enqueues = append(h.Enqueues,
		enqk("n1", "o", 50, "k01"), enqk("n2", "o", 60, "k02"), enqk("n3", "o", 70, "k03"),
		enqk("a1", "a", 50, "k04"), enqk("a2", "a", 60, "k05"), enqk("a3", "a", 70, "k06"),
		enqk("u1", "", 80, "k07"), enqk("u2", "", 13000, "k08"), enqk("a4", "a", 13000, "k09"),
		enqk("n4", "o", 14500, "k10"))
	h.Deliveries = append(h.Deliveries,
		keyed("c1", "k01", "n1", "o1", 1, 100, "n1"),
		keyed("c1", "k01", "n1", "o2", 2, 300, "n1"),
		keyed("c2", "k02", "n2", "o3", 1, 500, "n1"),
		keyed("c2", "k03", "n3", "o4", 1, 700, "n2"),
		keyed("c1", "k04", "a1", "x1", 1, 100, "n1"),
		keyed("c2", "k05", "a2", "x2", 1, 150, "n1"),
		keyed("c1", "k06", "a3", "x3", 1, 1250, "n2"),
		keyed("c1", "k07", "u1", "y1", 1, 120, "n1"),
		keyed("c2", "k08", "u2", "y2", 1, 15050, "n2"),
		keyed("c2", "k09", "a4", "x4", 1, 15000, "n2"),
		keyed("c1", "k10", "n4", "o5", 1, 18100, "n3"),
	)
	h.Settles = append(h.Settles,
		settle(Nack, "k01", "o1", OK, 200, 210),
		settle(Ack, "k01", "o2", OK, 400, 410),
		settle(Ack, "k02", "o3", OK, 600, 610),
		settle(Ack, "k03", "o4", OK, 800, 810),
		settle(Ack, "k04", "x1", OK, 1200, 1210),
		settle(Ack, "k05", "x2", OK, 1300, 1310),
		settle(Ack, "k06", "x3", OK, 1400, 1410),
		settle(Ack, "k07", "y1", OK, 130, 140),
		settle(Ack, "k08", "y2", OK, 15100, 15110),
		settle(Ack, "k09", "x4", OK, 15100, 15110),
		settle(Ack, "k10", "o5", OK, 18200, 18210),
	)
	h.Pauses = []PauseOp{{Queue: "k", Key: "o", DurationMs: 4000, Start: at(14000), End: at(14010), Outcome: OK, UntilMs: at(18000).UnixMilli()}}
	h.Lookups = []LeaseLookup{{Queue: "k", MessageID: "k03", Token: "o4", Attempt: 1, Consumer: "c2", OldLeader: "n2", NewLeader: "n3",
		At: at(900), Outcome: OK, AskedQueue: "k", State: "acked", Events: 3,
		Leased: []string{"consumer c2, attempt 1, deadline 2026-01-02T03:04:08.705Z (in 3s)"}}}
	return h
}

func TestCheckerFlowCleanHistoryPasses(t *testing.T) {
	r := Check(flowHistory())
	if !r.OK() {
		t.Fatalf("clean flow history flagged: %+v", r.Violations)
	}
	f := r.Flow
	if f.MaxInFlight["k/a"] != 2 || f.MaxInFlight["k/o"] != 1 || f.OrderedMessages != 4 || f.OrderedAcrossLeaders != 2 {
		t.Fatalf("caps and order figures: %+v", f)
	}
	if f.Pauses != 1 || f.PausesJudgedEnd != 1 || !slices.Equal(f.PauseLatenessMs, []int64{100}) || f.PausesAcrossLeaders != 1 {
		t.Fatalf("pause figures: %+v", f)
	}
	if f.Lookups != 1 || f.LookupsFound != 1 {
		t.Fatalf("lookup figures: %+v", f)
	}
}

// TestCheckerFlagsFlowViolations feeds each flow rule a history that
// breaks it and expects it named.
func TestCheckerFlagsFlowViolations(t *testing.T) {
	move := func(h *History, token string, grantMs int64) {
		for i := range h.Deliveries {
			if h.Deliveries[i].Token == token {
				h.Deliveries[i].DeadlineMs = at(grantMs).UnixMilli() + vt
				h.Deliveries[i].Recv = at(grantMs + 1)
			}
		}
	}
	moveSettle := func(h *History, token string, startMs int64) {
		for i := range h.Settles {
			if h.Settles[i].Token == token {
				h.Settles[i].Start, h.Settles[i].End = at(startMs), at(startMs+10)
			}
		}
	}
	cases := []struct {
		name   string
		want   string
		mutate func(h *History)
	}{
		{"three in flight under a cap of 2", InvOverCap, func(h *History) {
			// a5 granted at 1000 while a1 and a2 are held (their acks
			// succeed later).
			h.Enqueues = append(h.Enqueues, enqk("a5", "a", 900, "k11"))
			h.Deliveries = append(h.Deliveries, keyed("c2", "k11", "a5", "x5", 1, 1000, "n2"))
			h.Settles = append(h.Settles, settle(Ack, "k11", "x5", OK, 1100, 1110))
		}},
		{"two in flight under a cap of 1", InvOverCap, func(h *History) {
			move(h, "o3", 350) // n2 granted while n1's second lease is held until its ack at 400
		}},
		{"a later message before an earlier one is settled", InvKeyOrder, func(h *History) {
			// n2 is granted (and acked) after n1's nack, before n1 comes back.
			move(h, "o3", 250)
			moveSettle(h, "o3", 260)
		}},
		{"a paused key granted", InvPausedGrant, func(h *History) {
			move(h, "o5", 15000)
			moveSettle(h, "o5", 15100)
		}},
		{"a pause stops the other keys", InvPauseStoppedOthers, func(h *History) {
			move(h, "x4", 18200)
			moveSettle(h, "x4", 18300)
			move(h, "y2", 18200)
			moveSettle(h, "y2", 18300)
		}},
		{"a timed pause that does not end", InvPauseNotEnded, func(h *History) {
			move(h, "o5", 31000)
			moveSettle(h, "o5", 31100)
		}},
		{"a story without the old leader's lease", InvHistoryLostLease, func(h *History) {
			h.Lookups[0].Leased = []string{"consumer c2, attempt 2, deadline 2026-01-02T03:04:08.705Z (in 3s)"}
		}},
		{"a story not found", InvHistoryLostLease, func(h *History) {
			h.Lookups[0].Outcome, h.Lookups[0].Code, h.Lookups[0].Leased = Failed, "NotFound", nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := flowHistory()
			tc.mutate(h)
			r := Check(h)
			if r.ViolationsByInvariant[tc.want] == 0 {
				t.Fatalf("want %s, got %+v", tc.want, r.Violations)
			}
		})
	}
}

// TestCheckerFlowCountsOnlyCertainLeases: a lease whose end may have come
// earlier (an ack that got no answer, a dropped stream) does not count
// against the next grant, and a pause whose answer was lost holds
// nothing.
func TestCheckerFlowCountsOnlyCertainLeases(t *testing.T) {
	h := flowHistory()
	// n2 granted at 350: n1's second lease is acked at 400 ... but by an
	// ack that got no answer and began at 340, which may have applied.
	for i := range h.Deliveries {
		if h.Deliveries[i].Token == "o3" {
			h.Deliveries[i].DeadlineMs = at(350).UnixMilli() + vt
			h.Deliveries[i].Recv = at(351)
		}
	}
	for i := range h.Settles {
		if h.Settles[i].Token == "o2" {
			h.Settles[i].Outcome, h.Settles[i].Start, h.Settles[i].End = Unknown, at(340), at(4340)
		}
	}
	h.Pauses = append(h.Pauses, PauseOp{Queue: "k", Key: "a", DurationMs: 3000, Start: at(14990), End: at(18990), Outcome: Unknown})
	if r := Check(h); !r.OK() {
		t.Fatalf("uncertain overlaps flagged: %+v", r.Violations)
	}
}
