// Package logconv converts between the public API's messages (raftq.v1)
// and the replicated log format's own copies (raftq.fsm.v1). It is the one
// place where the two meet: whoever builds a command converts the request
// with it, and whoever projects state for a client converts back. The
// copies are wire-identical today (the test checks every field), so a
// conversion never changes what is written to the log; if the API grows a
// field, the log format gains it only under a new log version.
package logconv

import (
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// QueueConfig returns the log-format copy of an API queue config (nil for
// nil). Throttle rules are copied; the result shares nothing mutable with c.
func QueueConfig(c *raftqv1.QueueConfig) *fsmv1.QueueConfig {
	if c == nil {
		return nil
	}
	out := &fsmv1.QueueConfig{
		VisibilityTimeoutMs: c.VisibilityTimeoutMs,
		MaxDeliveries:       c.MaxDeliveries,
		DeadLetterQueue:     c.DeadLetterQueue,
		MaxDepth:            c.MaxDepth,
		MaxBytes:            c.MaxBytes,
		MessageTtlMs:        c.MessageTtlMs,
		DedupWindowMs:       c.DedupWindowMs,
		MaxMessageBytes:     c.MaxMessageBytes,
		FairnessQuantum:     c.FairnessQuantum,
		ConcurrencyLimit:    c.ConcurrencyLimit,
		ConcurrencyLimits:   copyLimits(c.ConcurrencyLimits),
	}
	if r := c.Retry; r != nil {
		out.Retry = &fsmv1.RetryPolicy{InitialDelayMs: r.InitialDelayMs, MaxDelayMs: r.MaxDelayMs, Multiplier: r.Multiplier, Jitter: r.Jitter}
	}
	if c.Throttles != nil {
		out.Throttles = make(map[string]*fsmv1.ThrottleRule, len(c.Throttles))
		for k, r := range c.Throttles {
			if r == nil {
				out.Throttles[k] = nil // kept, so validation refuses it as before
				continue
			}
			out.Throttles[k] = &fsmv1.ThrottleRule{RatePerSec: r.RatePerSec, Burst: r.Burst}
		}
	}
	return out
}

// APIQueueConfig is QueueConfig's inverse, for reporting a stored config.
func APIQueueConfig(c *fsmv1.QueueConfig) *raftqv1.QueueConfig {
	if c == nil {
		return nil
	}
	out := &raftqv1.QueueConfig{
		VisibilityTimeoutMs: c.VisibilityTimeoutMs,
		MaxDeliveries:       c.MaxDeliveries,
		DeadLetterQueue:     c.DeadLetterQueue,
		MaxDepth:            c.MaxDepth,
		MaxBytes:            c.MaxBytes,
		MessageTtlMs:        c.MessageTtlMs,
		DedupWindowMs:       c.DedupWindowMs,
		MaxMessageBytes:     c.MaxMessageBytes,
		FairnessQuantum:     c.FairnessQuantum,
		ConcurrencyLimit:    c.ConcurrencyLimit,
		ConcurrencyLimits:   copyLimits(c.ConcurrencyLimits),
	}
	if r := c.Retry; r != nil {
		out.Retry = &raftqv1.RetryPolicy{InitialDelayMs: r.InitialDelayMs, MaxDelayMs: r.MaxDelayMs, Multiplier: r.Multiplier, Jitter: r.Jitter}
	}
	if c.Throttles != nil {
		out.Throttles = make(map[string]*raftqv1.ThrottleRule, len(c.Throttles))
		for k, r := range c.Throttles {
			if r == nil {
				out.Throttles[k] = nil
				continue
			}
			out.Throttles[k] = &raftqv1.ThrottleRule{RatePerSec: r.RatePerSec, Burst: r.Burst}
		}
	}
	return out
}

// EnqueueMessage returns the log-format copy of an API message (nil for
// nil). Payload, headers and throttle keys are shared, not copied: a
// request is not modified after it is decoded, and copying payloads on the
// enqueue path would cost a copy of every byte.
func EnqueueMessage(m *raftqv1.EnqueueMessage) *fsmv1.EnqueueMessage {
	if m == nil {
		return nil
	}
	return &fsmv1.EnqueueMessage{
		Payload:        m.Payload,
		Headers:        m.Headers,
		Priority:       m.Priority,
		FairnessKey:    m.FairnessKey,
		Weight:         m.Weight,
		ThrottleKeys:   m.ThrottleKeys,
		DelayMs:        m.DelayMs,
		DedupId:        m.DedupId,
		TtlMs:          m.TtlMs,
		ConcurrencyKey: m.ConcurrencyKey,
	}
}

// copyLimits copies concurrency_limits (nil stays nil), so the result
// shares no map with its source.
func copyLimits(m map[string]int32) map[string]int32 {
	if m == nil {
		return nil
	}
	out := make(map[string]int32, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// EnqueueMessages converts a request's messages (nil entries stay nil, so
// validation reports them by position).
func EnqueueMessages(ms []*raftqv1.EnqueueMessage) []*fsmv1.EnqueueMessage {
	if ms == nil {
		return nil
	}
	out := make([]*fsmv1.EnqueueMessage, len(ms))
	// One allocation for the whole batch instead of one per message.
	backing := make([]fsmv1.EnqueueMessage, len(ms))
	for i, m := range ms {
		if m == nil {
			continue
		}
		b := &backing[i]
		b.Payload, b.Headers, b.Priority, b.FairnessKey = m.Payload, m.Headers, m.Priority, m.FairnessKey
		b.Weight, b.ThrottleKeys, b.DelayMs, b.DedupId, b.TtlMs = m.Weight, m.ThrottleKeys, m.DelayMs, m.DedupId, m.TtlMs
		b.ConcurrencyKey = m.ConcurrencyKey
		out[i] = b
	}
	return out
}
