package client

import (
	"context"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func TestLeasesHandBackOnlyUnstarted(t *testing.T) {
	now := time.Now()
	l := newLeases(0)
	running, _ := l.add(&raftqv1.Delivery{Id: "1", LeaseToken: "t1"}, now)
	queued, _ := l.add(&raftqv1.Delivery{Id: "2", LeaseToken: "t2"}, now)
	if !l.start(running, func(error) {}) {
		t.Fatal("start of a held lease failed")
	}
	back := l.closeQueued()
	if len(back) != 1 || back[0] != queued {
		t.Fatalf("handed back %v, want only the unstarted lease", back)
	}
	if l.start(queued, func(error) {}) {
		t.Fatal("a handed-back lease started")
	}
	if _, ok := l.add(&raftqv1.Delivery{Id: "3", LeaseToken: "t3"}, now); ok {
		t.Fatal("add after close succeeded")
	}
	if !l.finish(running) {
		t.Fatal("the running lease was not settled")
	}
}

func TestLeasesSchedule(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name       string
		lease      time.Duration // ConsumerOptions.VisibilityTimeout
		deadline   time.Duration // broker deadline from now; 0 = unset
		wantExtend time.Duration
	}{
		{"broker deadline", 0, 10 * time.Second, 5 * time.Second},
		{"configured lease is shorter", 4 * time.Second, 10 * time.Second, 2 * time.Second},
		{"broker deadline is shorter", 4 * time.Second, 2 * time.Second, time.Second},
		{"nothing known", 0, 0, defaultLease / 2},
		{"already past", 0, -time.Second, minExtendInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLeases(tc.lease)
			var ms int64
			if tc.deadline != 0 {
				ms = now.Add(tc.deadline).UnixMilli()
			}
			h, _ := l.add(&raftqv1.Delivery{Id: "1", LeaseToken: "t", LeaseDeadlineMs: ms}, now)
			// Deadlines travel in whole milliseconds.
			if got := h.next.Sub(now); got < tc.wantExtend-time.Millisecond || got > tc.wantExtend+time.Millisecond {
				t.Fatalf("extend after %v, want %v", got, tc.wantExtend)
			}
		})
	}
}

func TestLeasesLostCancelsHandler(t *testing.T) {
	l := newLeases(0)
	h, _ := l.add(&raftqv1.Delivery{Id: "1", LeaseToken: "t"}, time.Now())
	ctx, cancel := context.WithCancelCause(context.Background())
	l.start(h, cancel)
	l.lost("t")
	if context.Cause(ctx) != ErrLeaseLost {
		t.Fatalf("cause = %v", context.Cause(ctx))
	}
	if l.finish(h) {
		t.Fatal("a lost lease was settled")
	}
}

// TestLeasesScheduleSkewedClock (issue 20, hole 7): the lease's end is
// reckoned from the remaining time the broker reports, on the client's
// own (monotonic) clock from receipt, never by comparing the leader's
// deadline with the client's wall clock: a client an hour ahead used to
// extend every 50 ms (the lease looked already expired), one an hour
// behind only after half an hour (long after the lease had lapsed).
func TestLeasesScheduleSkewedClock(t *testing.T) {
	now := time.Now()
	const remaining = 10 * time.Second
	for _, skew := range []time.Duration{-time.Hour, -3 * time.Second, 0, 3 * time.Second, time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			// The broker's clock reads now-skew: its deadline, read on
			// our clock, is off by skew.
			deadline := now.Add(-skew).Add(remaining).UnixMilli()
			l := newLeases(0)
			h, _ := l.add(&raftqv1.Delivery{Id: "1", LeaseToken: "t", LeaseDeadlineMs: deadline, LeaseRemainingMs: remaining.Milliseconds()}, now)
			if got := h.next.Sub(now); got != remaining/2 {
				t.Fatalf("delivery: extend after %v, want %v", got, remaining/2)
			}
			if got := h.expiry.Sub(now); got != remaining {
				t.Fatalf("delivery: lease ends after %v, want %v", got, remaining)
			}
			later := now.Add(remaining / 2)
			l.extended("t", later.Add(-skew).Add(remaining).UnixMilli(), remaining.Milliseconds(), later)
			if got := h.next.Sub(later); got != remaining/2 {
				t.Fatalf("extension: extend after %v, want %v", got, remaining/2)
			}
		})
	}
}
