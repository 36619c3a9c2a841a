package scheduler

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestBackoffMs: the policy's delay for each failed attempt, exactly:
// initial × multiplier^(n−1) capped at max, spread by ±jitter around it
// (u = 0 the low end, 0.5 the middle, near 1 the high end), rounded to the
// millisecond, never negative, never past the longest duration.
func TestBackoffMs(t *testing.T) {
	p := &fsmv1.RetryPolicy{InitialDelayMs: 1000, MaxDelayMs: 300_000, Multiplier: 2, Jitter: 0.2}
	flat := &fsmv1.RetryPolicy{InitialDelayMs: 1000, MaxDelayMs: 300_000, Multiplier: 2}
	for _, tc := range []struct {
		p        *fsmv1.RetryPolicy
		attempts int32
		u        float64
		want     int64
	}{
		{flat, 1, 0.9, 1000},
		{flat, 2, 0, 2000},
		{flat, 3, 0, 4000},
		{flat, 9, 0, 256_000},
		{flat, 10, 0, 300_000}, // 512,000 capped
		{flat, 1_000_000, 0, 300_000},
		{flat, 0, 0, 1000}, // no attempt yet counts as the first
		{p, 1, 0.5, 1000},
		{p, 1, 0, 800},
		{p, 1, 0.75, 1100},
		{p, 10, 0, 240_000},
		{p, 10, 0.999999, 360_000}, // jitter spreads around the cap
		{&fsmv1.RetryPolicy{InitialDelayMs: 3, MaxDelayMs: 10, Multiplier: 1.5}, 2, 0, 5}, // 4.5 rounds to 5
		{&fsmv1.RetryPolicy{InitialDelayMs: 0, MaxDelayMs: 10, Multiplier: 2, Jitter: 1}, 5, 0.9, 0},
		{&fsmv1.RetryPolicy{InitialDelayMs: 10, MaxDelayMs: 10, Multiplier: 2, Jitter: 1}, 5, 0, 0},
		{&fsmv1.RetryPolicy{InitialDelayMs: fsm.MaxDurationMs, MaxDelayMs: fsm.MaxDurationMs, Multiplier: 1e300, Jitter: 1}, 1000, 0.999, fsm.MaxDurationMs},
		{&fsmv1.RetryPolicy{InitialDelayMs: 5, MaxDelayMs: 50, Multiplier: math.MaxFloat64}, 3, 0, 50}, // +Inf capped
		{nil, 3, 0, 0},
	} {
		if got := BackoffMs(tc.p, tc.attempts, tc.u); got != tc.want {
			t.Errorf("BackoffMs(%v, %d, %g) = %d, want %d", tc.p, tc.attempts, tc.u, got, tc.want)
		}
	}
}

// TestExpiryBacksOff: with a retry policy, each lease that expires
// carries its backoff in the LeaseExpire entry, computed by the leader
// with its jitter draw, and the message is redelivered exactly that long
// after the expiry (fake time: to the millisecond); the attempt that
// reaches max_deliveries dead-letters at once. Without the policy the
// expiry redelivers at once and the entry carries no delays.
func TestExpiryBacksOff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		// u = 0.75: every delay is 1 + 0.5×0.5 = 1.25 times the policy's.
		e := newEnv(t, func(c *Config) { c.LeaseGrace = -1; c.Jitter = func() float64 { return 0.75 } })
		var mu sync.Mutex
		var carried [][]int64
		e.p.setHook(func(_ context.Context, cmd *fsmv1.Command) error {
			if x := cmd.GetLeaseExpire(); x != nil {
				mu.Lock()
				carried = append(carried, x.GetRetryDelaysMs())
				mu.Unlock()
			}
			return nil
		})
		e.raise(fsm.RetryVersion)
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000, MaxDeliveries: 4,
			Retry: &fsmv1.RetryPolicy{InitialDelayMs: 400, MaxDelayMs: 1000, Multiplier: 2, Jitter: 0.5}})
		c := e.register("q", 10)
		e.enqueueN("q", 1, nil)
		d := e.recv(c)
		for attempt, wait := range []time.Duration{500 * time.Millisecond, 1000 * time.Millisecond, 1250 * time.Millisecond} {
			e.advance(1000 * time.Millisecond) // the lease expires
			e.expectNone(c)
			e.advance(wait - time.Millisecond)
			e.expectNone(c)
			e.advance(time.Millisecond)
			next := e.recv(c)
			if next.ID != d.ID || next.Attempt != int32(attempt+2) {
				t.Fatalf("redelivery %+v after %+v", next, d)
			}
			d = next
		}
		e.advance(1000 * time.Millisecond) // the fourth attempt expires: to the DLQ at once
		if st := e.info("q").Stats; st.DeadLettered != 1 || st.Delayed != 0 || st.ExpiredTotal != 4 {
			t.Fatalf("after the last attempt: %+v", st)
		}
		mu.Lock()
		want := [][]int64{{500}, {1000}, {1250}, nil}
		if len(carried) != len(want) {
			t.Fatalf("expire entries carried %v, want %v", carried, want)
		}
		for i := range want {
			if len(carried[i]) != len(want[i]) || len(want[i]) > 0 && carried[i][0] != want[i][0] {
				t.Fatalf("expire entries carried %v, want %v", carried, want)
			}
		}
		mu.Unlock()

		// The same without a policy: at once, and no delays in the entry.
		e.createQueue("plain", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
		pc := e.register("plain", 10)
		e.enqueueN("plain", 1, nil)
		e.recv(pc)
		e.advance(1000 * time.Millisecond)
		if again := e.recv(pc); again.Attempt != 2 {
			t.Fatalf("plain redelivery %+v", again)
		}
		mu.Lock()
		defer mu.Unlock()
		if last := carried[len(carried)-1]; last != nil {
			t.Fatalf("a queue without a policy carried delays %v", last)
		}
	})
}

// TestRetryDelaysNeedTheVersion: below fsm.RetryVersion the leader
// computes no delays (an older entry would ignore them), even for a
// queue whose config carries a policy.
func TestRetryDelaysNeedTheVersion(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LeaseGrace = -1 })
		e.raise(fsm.RetryVersion - 1)
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000,
			Retry: &fsmv1.RetryPolicy{InitialDelayMs: 400, MaxDelayMs: 1000, Multiplier: 2}})
		c := e.register("q", 10)
		e.enqueueN("q", 1, nil)
		d := e.recv(c)
		if got := e.s.RetryDelays([]*fsmv1.Ref{ref(t, d)}); got != nil {
			t.Fatalf("RetryDelays %v below the version", got)
		}
		e.advance(1000 * time.Millisecond)
		if again := e.recv(c); again.Attempt != 2 {
			t.Fatalf("redelivery %+v", again)
		}
	})
}
