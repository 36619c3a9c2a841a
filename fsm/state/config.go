package state

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// Defaults and limits of the public API (API.md, QueueConfig).
const (
	DefaultVisibilityTimeoutMs = 30_000
	DefaultMaxDeliveries       = 10
	DefaultDedupWindowMs       = 120_000
	DefaultMaxMessageBytes     = 1 << 20
	DefaultFairnessQuantum     = 1
	DLQSuffix                  = ".dlq"

	MaxQueueNameLen     = 255
	MaxMessageBytesCap  = 16 << 20 // the largest max_message_bytes a queue may set
	MaxDurationMs       = 366 * 24 * 3600 * 1000
	MaxThrottleKeys     = 16
	MaxKeyLen           = 255
	MaxHeaders          = 64
	MaxHeaderBytes      = 16 << 10
	MaxDedupIDLen       = 255
	MaxThrottleRules    = 10_000
	MaxFairnessQuantum  = 1_000_000
	MaxMaxDeliveries    = 1_000_000
	MaxWeight           = 1_000_000
	MaxThrottleRate     = 1e9
	MaxThrottleBurst    = 1_000_000_000
	maxMessagesPerEntry = 1 << 20 // ids are index<<20 | position
)

// ValidateQueueName checks API.md's rule: 1–255 characters of [A-Za-z0-9._-].
// A bad character is reported as the character, not as one of its bytes.
func ValidateQueueName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: queue name is empty", ErrInvalid)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if ok {
			continue
		}
		if r == utf8.RuneError {
			return fmt.Errorf("%w: queue name %q has byte %#02x, not UTF-8 text; allowed are [A-Za-z0-9._-]", ErrInvalid, name, name[i])
		}
		return fmt.Errorf("%w: queue name %q has character %q outside [A-Za-z0-9._-]", ErrInvalid, name, r)
	}
	if len(name) > MaxQueueNameLen {
		return fmt.Errorf("%w: queue name is %d characters, the limit is %d", ErrInvalid, len(name), MaxQueueNameLen)
	}
	return nil
}

// validateConfig checks the ranges of a client-supplied config (zeros allowed:
// they mean the default).
func validateConfig(c *fsmv1.QueueConfig) error {
	if c == nil {
		return nil
	}
	checks := []struct {
		field string
		v     int64
		max   int64
		human func(int64) string // the unit a person reads; nil for counts
	}{
		{"visibility_timeout_ms", c.VisibilityTimeoutMs, MaxDurationMs, HumanMs},
		{"max_deliveries", int64(c.MaxDeliveries), MaxMaxDeliveries, nil},
		{"max_depth", c.MaxDepth, math.MaxInt64, nil},
		{"max_bytes", c.MaxBytes, math.MaxInt64, HumanBytes},
		{"message_ttl_ms", c.MessageTtlMs, MaxDurationMs, HumanMs},
		{"dedup_window_ms", c.DedupWindowMs, MaxDurationMs, HumanMs},
		{"max_message_bytes", c.MaxMessageBytes, MaxMessageBytesCap, HumanBytes},
		{"fairness_quantum", int64(c.FairnessQuantum), MaxFairnessQuantum, nil},
	}
	for _, ch := range checks {
		if ch.v < 0 {
			return fmt.Errorf("%w: config.%s is negative (%d)", ErrInvalid, ch.field, ch.v)
		}
		if ch.v > ch.max {
			if ch.human != nil {
				return fmt.Errorf("%w: config.%s is %d (%s), the limit is %d (%s)", ErrInvalid, ch.field, ch.v, ch.human(ch.v), ch.max, ch.human(ch.max))
			}
			return fmt.Errorf("%w: config.%s is %d, the limit is %d", ErrInvalid, ch.field, ch.v, ch.max)
		}
	}
	if c.DeadLetterQueue != "" {
		if err := ValidateQueueName(c.DeadLetterQueue); err != nil {
			return fmt.Errorf("config.dead_letter_queue: %w", err)
		}
	}
	if err := validateConcurrency(c); err != nil {
		return err
	}
	if len(c.Throttles) > MaxThrottleRules {
		return fmt.Errorf("%w: config.throttles has %d rules, the limit is %d", ErrInvalid, len(c.Throttles), MaxThrottleRules)
	}
	for k, r := range c.Throttles {
		if k == "" || len(k) > MaxKeyLen {
			return fmt.Errorf("%w: config.throttles key %q must be 1-%d bytes", ErrInvalid, k, MaxKeyLen)
		}
		if r == nil || math.IsNaN(r.RatePerSec) || r.RatePerSec <= 0 || r.RatePerSec > MaxThrottleRate {
			return fmt.Errorf("%w: config.throttles[%q].rate_per_sec must be in (0, %g]", ErrInvalid, k, float64(MaxThrottleRate))
		}
		if r.Burst < 0 || r.Burst > MaxThrottleBurst {
			return fmt.Errorf("%w: config.throttles[%q].burst must be in [0, %d]", ErrInvalid, k, MaxThrottleBurst)
		}
	}
	return nil
}

// effectiveConfig returns a copy of c with every default filled in, as
// QueueInfo reports it. dlq is the resolved dead-letter queue name ("" for a
// queue that is itself a dead-letter queue).
func effectiveConfig(c *fsmv1.QueueConfig, dlq string) *fsmv1.QueueConfig {
	out := &fsmv1.QueueConfig{}
	if c != nil {
		out = proto.Clone(c).(*fsmv1.QueueConfig)
	}
	if out.VisibilityTimeoutMs == 0 {
		out.VisibilityTimeoutMs = DefaultVisibilityTimeoutMs
	}
	if out.MaxDeliveries == 0 {
		out.MaxDeliveries = DefaultMaxDeliveries
	}
	if out.DedupWindowMs == 0 {
		out.DedupWindowMs = DefaultDedupWindowMs
	}
	if out.MaxMessageBytes == 0 {
		out.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if out.FairnessQuantum == 0 {
		out.FairnessQuantum = DefaultFairnessQuantum
	}
	for _, r := range out.Throttles {
		if r.Burst == 0 {
			r.Burst = 1
		}
	}
	out.DeadLetterQueue = dlq
	return out
}

// configFields are the QueueConfig field names an update mask may name.
var configFields = []string{
	"visibility_timeout_ms", "max_deliveries", "dead_letter_queue", "max_depth",
	"max_bytes", "message_ttl_ms", "dedup_window_ms", "throttles",
	"max_message_bytes", "fairness_quantum", "concurrency_limit", "concurrency_limits",
	"retry", // log version 20 (RetryVersion): replaces the whole policy
}

// ValidateMask checks that every path names a QueueConfig field.
func ValidateMask(paths []string) error { return validateMask(paths, configFields) }

// validateMask checks paths against fields, the names an entry's version
// knows (olderConfigFields before RetryVersion: the same answer as then).
func validateMask(paths, fields []string) error {
	for _, p := range paths {
		if !slices.Contains(fields, strings.TrimPrefix(p, "config.")) {
			return fmt.Errorf("%w: update_mask path %q is not a QueueConfig field (one of %s)", ErrInvalid, p, strings.Join(fields, ", "))
		}
	}
	return nil
}

// olderConfigFields are the mask paths entries before RetryVersion know.
var olderConfigFields = configFields[:len(configFields)-1]

// mergeConfig applies the masked fields of upd onto cur (both raw, not
// effective). An empty mask replaces every field.
func mergeConfig(cur, upd *fsmv1.QueueConfig, mask []string) *fsmv1.QueueConfig {
	if upd == nil {
		upd = &fsmv1.QueueConfig{}
	}
	if len(mask) == 0 {
		return proto.Clone(upd).(*fsmv1.QueueConfig)
	}
	out := proto.Clone(cur).(*fsmv1.QueueConfig)
	for _, p := range mask {
		switch strings.TrimPrefix(p, "config.") {
		case "visibility_timeout_ms":
			out.VisibilityTimeoutMs = upd.VisibilityTimeoutMs
		case "max_deliveries":
			out.MaxDeliveries = upd.MaxDeliveries
		case "dead_letter_queue":
			out.DeadLetterQueue = upd.DeadLetterQueue
		case "max_depth":
			out.MaxDepth = upd.MaxDepth
		case "max_bytes":
			out.MaxBytes = upd.MaxBytes
		case "message_ttl_ms":
			out.MessageTtlMs = upd.MessageTtlMs
		case "dedup_window_ms":
			out.DedupWindowMs = upd.DedupWindowMs
		case "throttles":
			out.Throttles = nil
			for k, r := range upd.Throttles {
				if out.Throttles == nil {
					out.Throttles = map[string]*fsmv1.ThrottleRule{}
				}
				out.Throttles[k] = proto.Clone(r).(*fsmv1.ThrottleRule)
			}
		case "max_message_bytes":
			out.MaxMessageBytes = upd.MaxMessageBytes
		case "fairness_quantum":
			out.FairnessQuantum = upd.FairnessQuantum
		case "concurrency_limit":
			out.ConcurrencyLimit = upd.ConcurrencyLimit
		case "concurrency_limits":
			out.ConcurrencyLimits = nil
			for k, v := range upd.ConcurrencyLimits {
				if out.ConcurrencyLimits == nil {
					out.ConcurrencyLimits = map[string]int32{}
				}
				out.ConcurrencyLimits[k] = v
			}
		case "retry":
			out.Retry = nil
			if upd.Retry != nil {
				out.Retry = proto.Clone(upd.Retry).(*fsmv1.RetryPolicy)
			}
		}
	}
	return out
}

// bytesText is n in bytes, and in binary units when those differ.
func bytesText(n int64) string {
	if h := HumanBytes(n); !strings.HasSuffix(h, "bytes") && !strings.HasSuffix(h, "byte") {
		return fmt.Sprintf("%d bytes (%s)", n, h)
	}
	return HumanBytes(n)
}

// ValidateMessage checks one message against a queue's effective config.
// The transport calls it before proposing; the FSM calls it again so a bad
// command changes nothing.
func ValidateMessage(i int, m *fsmv1.EnqueueMessage, cfg *fsmv1.QueueConfig) error {
	if m == nil {
		return fmt.Errorf("%w: messages[%d] is null", ErrInvalid, i)
	}
	if int64(len(m.Payload)) > cfg.MaxMessageBytes {
		return fmt.Errorf("%w: messages[%d].payload is %s, the queue's limit (max_message_bytes) is %s", ErrInvalid,
			i, bytesText(int64(len(m.Payload))), bytesText(cfg.MaxMessageBytes))
	}
	if m.DelayMs < 0 || m.DelayMs > MaxDurationMs {
		return fmt.Errorf("%w: messages[%d].delay_ms is %d, it must be in [0, %d] (0 to %s)", ErrInvalid, i, m.DelayMs, int64(MaxDurationMs), HumanMs(MaxDurationMs))
	}
	if m.TtlMs < 0 || m.TtlMs > MaxDurationMs {
		return fmt.Errorf("%w: messages[%d].ttl_ms is %d, it must be in [0, %d] (0 to %s)", ErrInvalid, i, m.TtlMs, int64(MaxDurationMs), HumanMs(MaxDurationMs))
	}
	if m.Weight > MaxWeight {
		return fmt.Errorf("%w: messages[%d].weight is %d, the limit is %d", ErrInvalid, i, m.Weight, MaxWeight)
	}
	if len(m.FairnessKey) > MaxKeyLen {
		return fmt.Errorf("%w: messages[%d].fairness_key is longer than %d bytes", ErrInvalid, i, MaxKeyLen)
	}
	if len(m.ConcurrencyKey) > MaxKeyLen {
		return fmt.Errorf("%w: messages[%d].concurrency_key is longer than %d bytes", ErrInvalid, i, MaxKeyLen)
	}
	if len(m.DedupId) > MaxDedupIDLen {
		return fmt.Errorf("%w: messages[%d].dedup_id is longer than %d bytes", ErrInvalid, i, MaxDedupIDLen)
	}
	if len(m.ThrottleKeys) > MaxThrottleKeys {
		return fmt.Errorf("%w: messages[%d] has %d throttle_keys, the limit is %d", ErrInvalid, i, len(m.ThrottleKeys), MaxThrottleKeys)
	}
	for j, k := range m.ThrottleKeys {
		if k == "" || len(k) > MaxKeyLen {
			return fmt.Errorf("%w: messages[%d].throttle_keys[%d] must be 1-%d bytes", ErrInvalid, i, j, MaxKeyLen)
		}
	}
	if len(m.Headers) > MaxHeaders {
		return fmt.Errorf("%w: messages[%d] has %d headers, the limit is %d", ErrInvalid, i, len(m.Headers), MaxHeaders)
	}
	size := 0
	for k, v := range m.Headers {
		size += len(k) + len(v)
	}
	if size > MaxHeaderBytes {
		return fmt.Errorf("%w: messages[%d].headers total %d bytes, the limit is %d (%s)", ErrInvalid, i, size, MaxHeaderBytes, HumanBytes(MaxHeaderBytes))
	}
	return nil
}
