package fsm

import (
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Defaults and limits of the public API (API.md, QueueConfig). The state
// store enforces them at apply; transport checks them before proposing.
const (
	DefaultVisibilityTimeoutMs = state.DefaultVisibilityTimeoutMs
	DefaultMaxDeliveries       = state.DefaultMaxDeliveries
	DefaultDedupWindowMs       = state.DefaultDedupWindowMs
	DefaultMaxMessageBytes     = state.DefaultMaxMessageBytes
	DefaultFairnessQuantum     = state.DefaultFairnessQuantum
	DLQSuffix                  = state.DLQSuffix

	MaxQueueNameLen    = state.MaxQueueNameLen
	MaxMessageBytesCap = state.MaxMessageBytesCap
	MaxDurationMs      = state.MaxDurationMs
	MaxThrottleKeys    = state.MaxThrottleKeys
	MaxKeyLen          = state.MaxKeyLen
	MaxHeaders         = state.MaxHeaders
	MaxHeaderBytes     = state.MaxHeaderBytes
	MaxDedupIDLen      = state.MaxDedupIDLen
	MaxThrottleRules   = state.MaxThrottleRules
	MaxFairnessQuantum = state.MaxFairnessQuantum
	MaxMaxDeliveries   = state.MaxMaxDeliveries
	MaxWeight          = state.MaxWeight
	MaxThrottleRate    = state.MaxThrottleRate
	MaxThrottleBurst   = state.MaxThrottleBurst
	MaxDedupWindowMs   = state.MaxDedupWindowMs

	// What the state counts for each message and dedup entry beside their
	// content (docs/api.md, Admission).
	MessageOverheadBytes    = state.MessageOverheadBytes
	HeaderOverheadBytes     = state.HeaderOverheadBytes
	DedupEntryOverheadBytes = state.DedupEntryOverheadBytes
)

// ValidateQueueName checks API.md's rule: 1–255 characters of [A-Za-z0-9._-].
func ValidateQueueName(name string) error { return state.ValidateQueueName(name) }

// HumanMs renders milliseconds as a person reads them ("30s", "366 days").
func HumanMs(ms int64) string { return state.HumanMs(ms) }

// HumanBytes renders a size in binary units ("16 MiB").
func HumanBytes(n int64) string { return state.HumanBytes(n) }

// ValidateRetry checks a queue's retry policy (nil: none): multiplier >=
// 1, jitter in [0, 1], initial_delay_ms <= max_delay_ms <= MaxDurationMs.
func ValidateRetry(p *fsmv1.RetryPolicy) error { return state.ValidateRetry(p) }

// ValidateMask checks that every path names a QueueConfig field.
func ValidateMask(paths []string) error { return state.ValidateMask(paths) }

// ValidateMessage checks one message against a queue's effective config.
func ValidateMessage(i int, m *fsmv1.EnqueueMessage, cfg *fsmv1.QueueConfig) error {
	return state.ValidateMessage(i, m, cfg)
}

// ValidateIdentity checks an identity or token name.
func ValidateIdentity(name string) error { return state.ValidateIdentity(name) }

// ValidatePattern checks a queue name pattern.
func ValidatePattern(p string) error { return state.ValidatePattern(p) }

// MatchPattern reports whether a queue name matches a pattern ('*' matches
// any run of characters, dots included).
func MatchPattern(pattern, name string) bool { return state.MatchPattern(pattern, name) }

// ParsePerm reads one permission name.
func ParsePerm(name string) (Perm, error) { return state.ParsePerm(name) }
