package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Sentinel errors. Each Raft-derived one wraps the matching raft error, so
// errors.Is works with either.
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
	// ErrRemoveLeader: the leader cannot remove itself; transfer leadership
	// first.
	ErrRemoveLeader = errors.New("cluster: cannot remove the current leader; transfer leadership first")
	// ErrBelowExpect: removing the node would leave fewer voters than
	// BootstrapExpect; the caller may force it.
	ErrBelowExpect = errors.New("cluster: removal would leave fewer voters than bootstrap-expect")
	// ErrNoSpace: the leader could not append the entry to its log for
	// lack of disk space (ENOSPC). Nothing was applied; raft has stepped
	// the node down, and it stands for election again.
	ErrNoSpace = errors.New("cluster: no space left on the data dir's disk")
	// ErrDataDirInUse: a node (or an offline tool) holds the data dir.
	ErrDataDirInUse = errors.New("cluster: the data dir is in use by a running node")
)

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
