package scheduler

import (
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestLeadershipLoopCannotKeepLeasesAlive: each new term grants a grace
// period, but a lease whose deadline passed a grace period or more before
// the term began gets none, so leadership moving every 1.6 s (shorter than
// the 2 s grace) cannot keep a lease from expiring: it expires no later
// than two grace periods past its deadline (issue 11, item 8).
func TestLeadershipLoopCannotKeepLeasesAlive(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const (
			grace  = 2 * time.Second
			period = 1600 * time.Millisecond
		)
		e := newEnv(t, func(c *Config) { c.LeaseGrace = grace })
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
		c := e.register("q", 1)
		e.enqueueN("q", 1, nil)
		d1 := e.recv(c)
		deadline := time.UnixMilli(d1.LeaseDeadlineMs)
		for term := 1; ; term++ {
			// The consumer takes what it is sent at once (a delivery left
			// in its buffer past its lease would lapse there, uncounted).
			var got []*state.Delivery
			for step := time.Duration(0); step < period && len(got) == 0; step += 100 * time.Millisecond {
				e.advance(100 * time.Millisecond)
				got = e.drain(c)
			}
			if len(got) > 0 {
				d2 := got[0]
				if d2.ID != d1.ID || d2.Attempt != 2 {
					t.Fatalf("redelivery %+v after %+v", d2, d1)
				}
				if late := time.Since(deadline); late > 2*grace {
					t.Fatalf("the lease expired %v past its deadline, more than twice the grace (%v)", late, grace)
				}
				if term < 3 {
					// Term 2 began 0.6 s after the deadline: its grace
					// still covered the lease.
					t.Fatalf("expired in term %d, inside a grace period", term)
				}
				return
			}
			if time.Since(deadline) > 10*grace {
				t.Fatalf("%d terms of %v each: the lease, %v past its deadline, never expired", term, period, time.Since(deadline))
			}
			// Leadership moves: the term ends (its consumers with it,
			// leases left as they are) and a new one begins.
			e.stop()
			e.start()
			c = e.register("q", 1)
		}
	})
}

// TestGraceCoversOnlyRecentDeadlines: a new term expires at once the
// leases whose deadline passed a grace period or more before it began,
// while those that lapsed more recently (or fall due during the grace)
// wait for the grace to end.
func TestGraceCoversOnlyRecentDeadlines(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LeaseGrace = 2 * time.Second })
		e.createQueue("old", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
		e.createQueue("new", &fsmv1.QueueConfig{VisibilityTimeoutMs: 4000})
		a, b := e.register("old", 1), e.register("new", 1)
		e.enqueueN("old", 1, nil)
		e.enqueueN("new", 1, nil)
		e.recv(a)
		e.recv(b)
		e.stop()
		// The term begins at 3.5 s: its grace covers deadlines after 1.5 s
		// and lasts until 5.5 s.
		e.advance(3500 * time.Millisecond)
		e.start()
		a, b = e.register("old", 1), e.register("new", 1)
		if d := e.recv(a); d.Attempt != 2 {
			t.Fatalf("old: attempt %d", d.Attempt)
		}
		e.expectNone(b) // deadline 4 s: inside the grace
		e.advance(2*time.Second - time.Millisecond)
		e.expectNone(b)
		e.advance(time.Millisecond)
		if d := e.recv(b); d.Attempt != 2 {
			t.Fatalf("new: attempt %d", d.Attempt)
		}
	})
}
