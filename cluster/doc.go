// Package cluster runs one node of a raftq cluster: it owns the node's
// hashicorp/raft instance (raft-boltdb log and stable store, file snapshots,
// TCP transport), memberlist discovery, bootstrap and join, reconciliation of
// gossip membership with the Raft configuration, and starting and stopping a
// leader-only service as leadership comes and goes.
//
// The package is agnostic of what is replicated: it takes any raft.FSM and a
// LeaderService, and never speaks the public API.
package cluster
