package transport

import (
	"context"
	"fmt"
	"testing"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc/codes"

	"github.com/raftq/raftq/raftgroup"
)

// Every sentinel the broker's operations return maps to DESIGN.md's code,
// also when wrapped.
func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{fsm.ErrInvalid, codes.InvalidArgument},
		{fsm.ErrQueueNotFound, codes.NotFound},
		{fsm.ErrQueueExists, codes.AlreadyExists},
		{fsm.ErrQueueFull, codes.ResourceExhausted},
		{broker.ErrOverloaded, codes.ResourceExhausted},
		{fsm.ErrStaleLease, codes.FailedPrecondition},
		{raftgroup.ErrNotLeader, codes.Unavailable},
		{raftgroup.ErrLeadershipLost, codes.Unavailable},
		{raftgroup.ErrNoTakeover, codes.Unavailable},
		{scheduler.ErrNotLeader, codes.Unavailable},
		{broker.ErrStopping, codes.Unavailable},
		{broker.ErrNoLeader, codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("wrapped: %w", tc.err)} {
			if tc.err == nil && err != nil {
				continue
			}
			if got := codeOf(err); got != tc.want {
				t.Errorf("codeOf(%v) = %v, want %v", err, got, tc.want)
			}
		}
	}
}
