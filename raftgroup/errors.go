package raftgroup

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Sentinel errors. Each Raft-derived one wraps the matching raft error, so
// errors.Is works with either. Their texts are what they said when the
// runtime was part of package cluster, which clients have seen in error
// details.
var (
	// ErrNotLeader: the operation needs the leader and this node is not it
	// (or it is handing leadership over). Nothing was applied; retry on the
	// leader.
	ErrNotLeader = fmt.Errorf("cluster: not the leader: %w", raft.ErrNotLeader)
	// ErrLeadershipLost: leadership was lost while the entry was in flight;
	// it may or may not commit (outcome unknown).
	ErrLeadershipLost = fmt.Errorf("cluster: leadership lost, outcome unknown: %w", raft.ErrLeadershipLost)
	// ErrShutdown: the node has been shut down.
	ErrShutdown = fmt.Errorf("cluster: node is shut down: %w", raft.ErrRaftShutdown)
	// ErrUnknownNode: no server with that id is in the Raft configuration.
	ErrUnknownNode = errors.New("cluster: unknown node")
	// ErrNoSpace: the leader could not append the entry to its log for
	// lack of disk space (ENOSPC). Nothing was applied; raft has stepped
	// the node down, and it stands for election again.
	ErrNoSpace = errors.New("cluster: no space left on the data dir's disk")
	// ErrNoTakeover: this node stepped down for a leadership transfer,
	// but no other node took over (it lost its quorum meanwhile); it
	// stands for election again.
	ErrNoTakeover = errors.New("cluster: transfer leadership: this node stepped down but no other node took over; it stands for election again")
)

// MapError is wrapRaftErr for the runtime's users that call raft
// themselves (the node's configuration changes through Group.Raft).
func MapError(op string, err error) error { return wrapRaftErr(op, err) }

// wrapRaftErr maps raft's errors onto ours (keeping raft's in the chain) and
// prefixes anything else with the operation.
func wrapRaftErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrLeadershipLost), errors.Is(err, ErrShutdown):
		return err
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w (%w)", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("cluster: %s: %w (%w)", op, err, context.DeadlineExceeded)
	default:
		return fmt.Errorf("cluster: %s: %w", op, err)
	}
}
