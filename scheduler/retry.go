package scheduler

import (
	"math"
	"math/rand/v2"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Retry backoff (docs/api.md, QueueConfig.retry; fsm/DESIGN.md, version
// 14). The leader computes each failed attempt's delay here, floating
// point and jitter included, rounds it to whole milliseconds and writes it
// into the entry (LeaseExpire.retry_delays_ms from the sweeper,
// NackOne.retry_delay_ms from the broker's Nack): the state only reads the
// integers, so replicas agree whatever their float arithmetic or
// randomness, and a replayed log delays exactly as it did live.

// BackoffMs is the delay before attempt n+1 after attempt n (attempts = n,
// the failed one included) failed under policy p, with u in [0, 1) the
// jitter's draw: min(max, initial × multiplier^(n−1)), times 1 + jitter ×
// (2u − 1), rounded to the millisecond and kept within [0, the longest
// duration the API takes]. With jitter the spread is around the capped
// delay, so it may exceed max_delay_ms by up to jitter × max.
func BackoffMs(p *fsmv1.RetryPolicy, attempts int32, u float64) int64 {
	if p == nil {
		return 0
	}
	n := max(attempts, 1)
	d := float64(p.GetInitialDelayMs()) * math.Pow(p.GetMultiplier(), float64(n-1))
	if maxMs := float64(p.GetMaxDelayMs()); !(d <= maxMs) { // NaN or +Inf too
		d = maxMs
	}
	if j := p.GetJitter(); j > 0 {
		d *= 1 + j*(2*u-1)
	}
	return int64(min(max(math.Round(d), 0), fsm.MaxDurationMs))
}

// jitterDraw is the jitter's random source (Config.Jitter, or the
// runtime's generator, safe for concurrent use).
func (s *Scheduler) jitterDraw() float64 {
	if s.cfg.Jitter != nil {
		return s.cfg.Jitter()
	}
	return rand.Float64()
}

// retryDelay is the backoff for the lease ref names, from what v holds:
// 0 when its queue has no policy, the lease is not held with that token,
// the cluster is below fsm.RetryVersion, or this attempt reaches
// max_deliveries (the failure dead-letters it at once).
func (s *Scheduler) retryDelay(v fsm.View, ref *fsmv1.Ref) int64 {
	p, attempts, maxDeliveries, ok := v.RetryInput(ref)
	if !ok || attempts >= maxDeliveries {
		return 0
	}
	return BackoffMs(p, attempts, s.jitterDraw())
}

// retryDelays is retryDelay for each ref, or nil when every one is 0 (an
// entry without the field: what a queue without a policy always sends).
func (s *Scheduler) retryDelays(v fsm.View, refs []*fsmv1.Ref) []int64 {
	var out []int64
	for i, r := range refs {
		if d := s.retryDelay(v, r); d > 0 {
			if out == nil {
				out = make([]int64, len(refs))
			}
			out[i] = d
		}
	}
	return out
}

// RetryDelays is the backoff of each failed lease refs names, as a nack
// without its own delay gets it (the broker's Nack writes it into
// NackOne.retry_delay_ms); nil when none has any. It reads the state once.
func (s *Scheduler) RetryDelays(refs []*fsmv1.Ref) []int64 {
	var out []int64
	s.state.Read(func(v fsm.View) { out = s.retryDelays(v, refs) })
	return out
}
