package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// ErrSettingsNotReplicated: the cluster has not reached the log version
// that makes the settings replicated state (fsm.AdmitVersion); every
// voter must run a build that applies it first.
var ErrSettingsNotReplicated = errors.New("cluster settings need every voter at log version 9")

// SettingsChange is a change of the cluster settings; nil fields are
// left as they are.
type SettingsChange struct {
	MaxQueuedBytes *int64
	MaxQueues      *int64 // from log version 12 (fsm.GuardVersion)
	// IdempotencyKey makes a repeat change nothing (fsm.WriteKeyVersion).
	IdempotencyKey string
}

// SetClusterSettings proposes new cluster settings (nil: unchanged) and
// returns them as committed.
func (o Operator) SetClusterSettings(ctx context.Context, ch SettingsChange) (state.Settings, error) {
	if v := o.b.reads.ClusterVersion(); v < fsm.AdmitVersion {
		return state.Settings{}, fmt.Errorf("%w: the cluster is at log version %d (upgrade every voter)", ErrSettingsNotReplicated, v)
	}
	if ch.MaxQueuedBytes != nil && *ch.MaxQueuedBytes < 0 {
		return state.Settings{}, fmt.Errorf("%w: max_queued_bytes is negative (%d)", fsm.ErrInvalid, *ch.MaxQueuedBytes)
	}
	if ch.MaxQueues != nil {
		if *ch.MaxQueues < 0 {
			return state.Settings{}, fmt.Errorf("%w: max_queues is negative (%d)", fsm.ErrInvalid, *ch.MaxQueues)
		}
		// An older entry would drop the field without a word.
		if err := o.b.versions.need(fsm.GuardVersion, "SetClusterSettings.max_queues"); err != nil {
			return state.Settings{}, err
		}
	}
	if ch.IdempotencyKey != "" {
		if err := o.b.versions.need(fsm.WriteKeyVersion, "SetClusterSettings.idempotency_key"); err != nil {
			return state.Settings{}, err
		}
	}
	cmd := &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueuedBytes: ch.MaxQueuedBytes, MaxQueues: ch.MaxQueues, IdempotencyKey: ch.IdempotencyKey}}}
	if _, err := apply[*fsm.Done](ctx, o.b, cmd); err != nil {
		return state.Settings{}, err
	}
	_, s := o.b.reads.Held()
	return s, nil
}
