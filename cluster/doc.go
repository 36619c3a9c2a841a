// Package cluster runs one node of a raftq cluster around its data
// group: over its gossip membership (package membership), bootstrap and
// join, the reconciliation of gossip membership with the data
// group's Raft configuration, the node's and the cluster's identity, the
// leave, and the node's status. The data group's Raft runtime (the
// hashicorp/raft instance, its stores, snapshots and published
// leadership) is package raftgroup's Group, which Node.Group returns; it
// runs on the Raft port the host builds (raftmux).
//
// The package is agnostic of what is replicated: it takes any raft.FSM and
// an optional LeaderService, and never speaks the public API.
package cluster
