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

// SetClusterSettings proposes new cluster settings (nil: unchanged) and
// returns them as committed.
func (b *Broker) SetClusterSettings(ctx context.Context, maxQueuedBytes *int64) (state.Settings, error) {
	if v := b.state.ClusterVersion(); v < fsm.AdmitVersion {
		return state.Settings{}, fmt.Errorf("%w: the cluster is at log version %d (upgrade every voter)", ErrSettingsNotReplicated, v)
	}
	if maxQueuedBytes != nil && *maxQueuedBytes < 0 {
		return state.Settings{}, fmt.Errorf("%w: max_queued_bytes is negative (%d)", fsm.ErrInvalid, *maxQueuedBytes)
	}
	cmd := &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueuedBytes: maxQueuedBytes}}}
	if _, err := apply[*fsm.Done](ctx, b, cmd); err != nil {
		return state.Settings{}, err
	}
	_, s := b.state.Held()
	return s, nil
}
