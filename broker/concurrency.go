package broker

import (
	"fmt"
	"strings"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// concurrencyConfig refuses a config or mask that sets concurrency
// caps before the cluster applies fsm.ConcurrencyVersion: an older voter
// would ignore them, and hold nothing back where the leader does.
func (g versionGate) concurrencyConfig(cfg *raftqv1.QueueConfig, mask []string) error {
	if cfg.GetConcurrencyLimit() != 0 {
		return g.need(fsm.ConcurrencyVersion, "config.concurrency_limit")
	}
	if len(cfg.GetConcurrencyLimits()) > 0 {
		return g.need(fsm.ConcurrencyVersion, "config.concurrency_limits")
	}
	for _, p := range mask {
		if f := strings.TrimPrefix(p, "config."); f == "concurrency_limit" || f == "concurrency_limits" {
			return g.need(fsm.ConcurrencyVersion, "update_mask path "+p)
		}
	}
	return nil
}

// concurrencyKeys refuses messages carrying a concurrency key before
// the cluster applies fsm.ConcurrencyVersion.
func (g versionGate) concurrencyKeys(msgs []*raftqv1.EnqueueMessage) error {
	for i, m := range msgs {
		if m.GetConcurrencyKey() != "" {
			return g.need(fsm.ConcurrencyVersion, fmt.Sprintf("messages[%d].concurrency_key", i))
		}
	}
	return nil
}
