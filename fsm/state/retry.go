package state

import (
	"fmt"
	"math"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Retry backoff (log version RetryVersion, fsm/DESIGN.md). A queue's
// QueueConfig.retry is data the state keeps and validates; it never
// computes a delay from it. The leader does (broker/retry.go):
// it reads the message's attempts and the policy, draws the jitter, rounds
// to whole milliseconds and writes the result into the entry
// (NackOne.retry_delay_ms, LeaseExpire.retry_delays_ms). Apply only reads
// those integers, so no floating point, clock or randomness reaches the
// rule, and every replica delays the message by what the entry says.

// RetryVersion is the log version from which a queue may carry a retry
// policy and Nack / LeaseExpire entries carry the delays the leader
// computed from it.
const RetryVersion uint32 = 20

// ValidateRetry is validateRetry for the edge, which checks before it
// proposes (the state checks again as the entry applies).
func ValidateRetry(p *fsmv1.RetryPolicy) error { return validateRetry(p) }

// validateRetry checks a retry policy a command sets (nil: none).
// Comparisons of floats are exact and the same on every replica; NaN and
// infinities are refused (a NaN compares false to everything).
func validateRetry(p *fsmv1.RetryPolicy) error {
	if p == nil {
		return nil
	}
	switch {
	case p.InitialDelayMs < 0:
		return fmt.Errorf("%w: config.retry.initial_delay_ms is negative (%d)", ErrInvalid, p.InitialDelayMs)
	case p.MaxDelayMs > MaxDurationMs:
		return fmt.Errorf("%w: config.retry.max_delay_ms is %d (%s), the limit is %d (%s)", ErrInvalid,
			p.MaxDelayMs, HumanMs(p.MaxDelayMs), int64(MaxDurationMs), HumanMs(MaxDurationMs))
	case p.InitialDelayMs > p.MaxDelayMs:
		return fmt.Errorf("%w: config.retry.initial_delay_ms (%d) is more than max_delay_ms (%d)", ErrInvalid, p.InitialDelayMs, p.MaxDelayMs)
	case !(p.Multiplier >= 1) || math.IsInf(p.Multiplier, 0):
		return fmt.Errorf("%w: config.retry.multiplier is %g, it must be a finite number >= 1 (1 = the same delay every time)", ErrInvalid, p.Multiplier)
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return fmt.Errorf("%w: config.retry.jitter is %g, it must be in [0, 1] (a fraction of the delay)", ErrInvalid, p.Jitter)
	}
	return nil
}

// retryDelay is the delay an entry of version >= RetryVersion carries for
// one item, checked like any client-supplied duration.
func retryDelay(field string, ms int64) error {
	if ms < 0 || ms > MaxDurationMs {
		return fmt.Errorf("%w: %s is %d, it must be in [0, %d]", ErrInvalid, field, ms, int64(MaxDurationMs))
	}
	return nil
}

// Expire ends leases whose deadline has passed by the entry's clock, by the rules of the entry's
// version: from RetryVersion each ref's message waits the delay the leader
// wrote for it (retry_delays_ms[i]; none = 0), unless the expiry
// dead-letters it (max_deliveries reached, TTL passed: at once).
func (tx *Tx) Expire(c *fsmv1.LeaseExpire) *ItemsResult {
	refs := c.GetRefs()
	delays := c.GetRetryDelaysMs()
	if tx.version < RetryVersion {
		delays = nil // older builds ignore the field
	}
	if len(delays) > len(refs) {
		return &ItemsResult{Done: Done{Err: fmt.Errorf("%w: %d retry_delays_ms for %d refs", ErrInvalid, len(delays), len(refs))}}
	}
	res := &ItemsResult{Items: make([]error, len(refs))}
	for i, r := range refs {
		var delay int64
		if i < len(delays) {
			delay = delays[i]
			if err := retryDelay(fmt.Sprintf("retry_delays_ms[%d]", i), delay); err != nil {
				res.Items[i] = err
				continue
			}
		}
		q, m, err := tx.lookupLease(r)
		if err == nil {
			err = tx.expireOne(q, m, delay)
		}
		res.Items[i] = err
	}
	return res
}

// RetryInput is what the leader needs to compute a lease's backoff: its
// queue's retry policy (nil: none), the message's attempts so far (the
// failed one included) and the queue's max_deliveries. ok is false when
// the queue has no policy or the ref does not name a lease held with that
// token (the entry will be refused for it, or the lease moved on).
//
// attempts cannot change while the lease is held: only a grant counts an
// attempt, and a grant gives a new token. So the delay computed from it
// is the one the policy gives when the entry applies, whatever applies in
// between; only a policy changed in between is not seen (the entry uses
// the policy the leader read, as documented). Below cluster version
// RetryVersion it answers nothing: entries are proposed under the cluster
// version, and older ones ignore the delays.
func (v View) RetryInput(ref *fsmv1.Ref) (p *fsmv1.RetryPolicy, attempts, maxDeliveries int32, ok bool) {
	if v.s.ClusterVersion() < RetryVersion {
		return nil, 0, 0, false
	}
	q := v.s.queues[ref.GetQueue()]
	if q == nil || q.cfg.GetRetry() == nil || q.isDLQ {
		return nil, 0, 0, false
	}
	m := q.get(ref.GetMessageId())
	if m == nil || m.state != stateLeased || m.leaseToken() != ref.GetLeaseToken() {
		return nil, 0, 0, false
	}
	return q.cfg.Retry, m.attempts, q.cfg.MaxDeliveries, true
}
