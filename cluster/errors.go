package cluster

import "errors"

// Sentinel errors of the node's own operations. The data group's (not
// the leader, leadership lost, shut down, unknown node, no space) are
// raftgroup's.
var (
	// ErrRemoveLeader: the leader cannot remove itself; transfer leadership
	// first.
	ErrRemoveLeader = errors.New("cluster: cannot remove the current leader; transfer leadership first")
	// ErrBelowExpect: removing the node would leave fewer voters than
	// BootstrapExpect; the caller may force it.
	ErrBelowExpect = errors.New("cluster: removal would leave fewer voters than bootstrap-expect")
	// ErrDataDirInUse: a node (or an offline tool) holds the data dir.
	ErrDataDirInUse = errors.New("cluster: the data dir is in use by a running node")
)
