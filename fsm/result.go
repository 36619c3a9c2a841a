package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/state"
)

// The typed results of Apply, one per command (state.Result lists which).
// They are the state store's; these names are what callers use.
type (
	Result           = state.Result
	Done             = state.Done
	QueueResult      = state.QueueResult
	EnqueueResult    = state.EnqueueResult
	BatchResult      = state.BatchResult
	ItemsResult      = state.ItemsResult
	GrantResult      = state.GrantResult
	AckGrantResult   = state.AckGrantResult
	ExtendResult     = state.ExtendResult
	CountResult      = state.CountResult
	CheckpointResult = state.CheckpointResult
	RecountResult    = state.RecountResult
	Repair           = state.Repair
	Counters         = state.Counters
)

func failed(err error) *Done { return &Done{Err: err} }

// As returns r as the typed result T, or the whole-command error: err
// (a proposal's own failure) first, then r's Failure. It takes a
// proposer's two results directly: fsm.As[*fsm.CountResult](p.Propose(ctx, cmd)).
func As[T Result](r Result, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	if r == nil {
		return zero, fmt.Errorf("fsm: no result, want %T", zero)
	}
	if err := r.Failure(); err != nil {
		return zero, err
	}
	t, ok := r.(T)
	if !ok {
		return zero, fmt.Errorf("fsm: result %T, want %T", r, zero)
	}
	return t, nil
}
