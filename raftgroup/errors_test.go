package raftgroup

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

func TestWrapRaftErr(t *testing.T) {
	cases := []struct {
		in   error
		want []error
	}{
		{raft.ErrNotLeader, []error{ErrNotLeader, raft.ErrNotLeader}},
		{raft.ErrLeadershipLost, []error{ErrLeadershipLost, raft.ErrLeadershipLost}},
		{raft.ErrRaftShutdown, []error{ErrShutdown, raft.ErrRaftShutdown}},
		{raft.ErrLeadershipTransferInProgress, []error{ErrNotLeader, raft.ErrLeadershipTransferInProgress}},
		{raft.ErrEnqueueTimeout, []error{raft.ErrEnqueueTimeout, context.DeadlineExceeded}},
		{raft.ErrNothingNewToSnapshot, []error{raft.ErrNothingNewToSnapshot}},
	}
	for _, c := range cases {
		got := wrapRaftErr("op", c.in)
		for _, w := range c.want {
			if !errors.Is(got, w) {
				t.Errorf("wrapRaftErr(%v) = %v: not errors.Is %v", c.in, got, w)
			}
		}
	}
	if wrapRaftErr("op", nil) != nil {
		t.Error("nil not kept")
	}
}
