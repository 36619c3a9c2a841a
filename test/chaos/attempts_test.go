package chaos

import (
	"testing"
)

// withQuietDeadLetter adds to the clean history message m10 (payload "k",
// max_deliveries 3), enqueued at 15000, after the kill fault's effects are
// over (fault end 3000 + 2×3000 + 5000 = 14000): seen as attempt 1 by c1,
// abandoned, then dead-lettered and drained as attempt 4. Attempts 2 and
// 3 were counted and never seen: issue 11's "dead-lettered without ever
// reaching a worker", unless something below hides them.
func withQuietDeadLetter(h *History) {
	h.Enqueues = append(h.Enqueues, enq("k", OK, 15000, 15010, "m10"))
	h.Deliveries = append(h.Deliveries,
		deliver("c1", "q", "m10", "k", "t30", 1, 15020, 15021),
		deliver("c3", "q.dlq", "m10", "k", "t31", 4, 19000, 19001))
	h.Settles = append(h.Settles, settle(Ack, "m10", "t31", OK, 19100, 19110))
}

// TestCheckerAttemptsAgainstDeliveries: attempts counted but never seen
// are violations only where no fault and no stream end of that queue
// could have hidden them.
func TestCheckerAttemptsAgainstDeliveries(t *testing.T) {
	end := func(queue, code string, ms int64) StreamEnd {
		return StreamEnd{Consumer: "c1", Stream: 7, Queue: queue, At: at(ms), Code: code}
	}
	cases := []struct {
		name    string
		mutate  func(h *History)
		flagged bool
	}{
		{"every attempt seen", func(h *History) {
			withQuietDeadLetter(h)
			h.Deliveries = append(h.Deliveries,
				deliver("c2", "q", "m10", "k", "t32", 2, 18100, 18101),
				deliver("c2", "q", "m10", "k", "t33", 3, 18200, 18201))
			h.Settles = append(h.Settles,
				settle(Nack, "m10", "t32", OK, 18150, 18160), settle(Nack, "m10", "t33", OK, 18250, 18260))
		}, false},
		{"counted, never seen, nothing hid it", withQuietDeadLetter, true},
		{"hidden by a dropped stream of the queue", func(h *History) {
			withQuietDeadLetter(h)
			h.Drops = append(h.Drops, StreamDrop{Consumer: "c2", Stream: 8, Queue: "q", At: at(17000)})
		}, false},
		{"hidden by a stream of the DLQ that broke", func(h *History) {
			withQuietDeadLetter(h)
			h.Ends = append(h.Ends, end("q.dlq", "Unavailable", 18000))
		}, false},
		{"hidden by a fault", func(h *History) {
			withQuietDeadLetter(h)
			h.Faults = append(h.Faults, FaultEvent{Kind: Pause, Targets: []string{"n2"}, Start: at(16000), End: at(17000)})
		}, false},
		{"a fault's effects outlast its heal", func(h *History) {
			withQuietDeadLetter(h)
			h.Faults = append(h.Faults, FaultEvent{Kind: KillLeader, Targets: []string{"n2"}, Start: at(4000), End: at(5000)})
		}, false},
		{"a stream of another queue ends: no excuse", func(h *History) {
			withQuietDeadLetter(h)
			h.Queues = append(h.Queues, QueueSpec{Name: "r", DeadLetter: "r.dlq", MaxDeliveries: 3})
			h.Ends = append(h.Ends, end("r", "Unavailable", 17000))
		}, true},
		{"a stream ending too early: no excuse", func(h *History) {
			withQuietDeadLetter(h)
			h.Ends = append(h.Ends, end("q", "Unavailable", 13000))
		}, true},
		// Issue 11's large messages: every reconnect's stream fails in
		// the client (batch over its 4 MiB limit), which is the bug.
		{"streams the client refused for size do not excuse", func(h *History) {
			withQuietDeadLetter(h)
			for ms := int64(15500); ms < 19000; ms += 500 {
				h.Ends = append(h.Ends, end("q", "ResourceExhausted", ms))
			}
		}, true},
		{"first attempt never seen", func(h *History) {
			h.Enqueues = append(h.Enqueues, enq("k", OK, 16000, 16010, "m10"))
			h.Deliveries = append(h.Deliveries, deliver("c1", "q", "m10", "k", "t30", 2, 16020, 16021))
			h.Settles = append(h.Settles, settle(Ack, "m10", "t30", OK, 16100, 16110))
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanHistory()
			tc.mutate(h)
			r := Check(h)
			got := r.ViolationsByInvariant[InvUnseenAttempt] > 0
			if got != tc.flagged {
				t.Fatalf("%s flagged = %v, want %v; violations %+v", InvUnseenAttempt, got, tc.flagged, r.Violations)
			}
			if !tc.flagged && !r.OK() {
				t.Fatalf("violations: %+v", r.Violations)
			}
			if tc.flagged && len(r.Violations) != r.ViolationsByInvariant[InvUnseenAttempt] {
				t.Fatalf("other violations too: %+v", r.Violations)
			}
		})
	}
	// The clean history's gaps: m3 and m5 in the fault's shadow count as
	// unseen attempts explained.
	h := cleanHistory()
	h.Deliveries = append(h.Deliveries, deliver("c2", "q", "m5", "e", "t40", 3, 9000, 9001))
	h.Settles = append(h.Settles, settle(Ack, "m5", "t40", OK, 9100, 9110))
	r := Check(h)
	if r.UnseenAttempts != 1 || r.UnseenExcused != 1 {
		t.Fatalf("unseen %d, excused %d; violations %+v", r.UnseenAttempts, r.UnseenExcused, r.Violations)
	}
}

// TestCheckerAttemptOrderPerConsumer: one consumer sees a message's
// attempts grow; across consumers, receive order proves nothing.
func TestCheckerAttemptOrderPerConsumer(t *testing.T) {
	cases := []struct {
		name    string
		ds      []Delivery
		flagged bool
	}{
		{"growing", []Delivery{
			deliver("c1", "q", "m10", "k", "t30", 1, 15020, 15021),
			deliver("c1", "q", "m10", "k", "t31", 2, 18100, 18101),
		}, false},
		{"same lease seen twice", []Delivery{
			deliver("c1", "q", "m10", "k", "t30", 1, 15020, 15021),
			deliver("c1", "q", "m10", "k", "t30", 1, 15020, 15022),
		}, false},
		{"two consumers, late stream", []Delivery{
			deliver("c2", "q", "m10", "k", "t31", 2, 18100, 18101),
			deliver("c1", "q", "m10", "k", "t30", 1, 15020, 18500),
		}, false},
		{"goes down", []Delivery{
			deliver("c1", "q", "m10", "k", "t31", 2, 18100, 18101),
			deliver("c1", "q", "m10", "k", "t30", 1, 18600, 18601),
		}, true},
		// A seen grant handed back as if unsent: the rollback reuses its
		// number for the next grant.
		{"repeats with a new token", []Delivery{
			deliver("c1", "q", "m10", "k", "t30", 1, 15020, 15021),
			deliver("c1", "q", "m10", "k", "t31", 1, 18100, 18101),
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanHistory()
			h.Deliveries = append(h.Deliveries, tc.ds...)
			r := Check(h)
			if got := r.ViolationsByInvariant[InvAttemptOrder] > 0; got != tc.flagged {
				t.Fatalf("%s flagged = %v, want %v; violations %+v", InvAttemptOrder, got, tc.flagged, r.Violations)
			}
		})
	}
}
