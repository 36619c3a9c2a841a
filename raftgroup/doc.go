// Package raftgroup is the Raft runtime of one group on this node, for
// any raft.FSM: one hashicorp/raft instance with its directory, its log
// store (raftlog: the wal, or bolt for a directory that began there), its
// snapshot store (written behind, restored at start while the log opens,
// taken automatically by its own watch), the checks of corrupt state and
// the quarantine, a requested wipe, leadership published as values
// (Group.Leadership, WaitLeadership) and the operations on it (Apply,
// Barrier, VerifyLeader, TransferLeadership, Snapshot). It registers
// itself on the node's Raft port (raftmux) under its group id; a node
// opens one per group (the data group in the data dir itself, as every
// release before groups laid it out).
//
// It knows nothing of gossip or of who should be a voter: what it needs
// of the node's membership (where a peer's API is, whether a peer takes
// preambles, whether the node belongs to a cluster) comes in its Config,
// and the node (package cluster) makes the configuration changes through
// Group.Raft, Group.Bootstrap and Group.RemoveServer.
package raftgroup
