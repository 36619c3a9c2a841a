// Package cluster runs one node of a raftq cluster: it owns the node's
// hashicorp/raft instance (raft-wal or raft-boltdb log, raft-boltdb stable
// store, file snapshots, TCP transport), memberlist discovery, bootstrap and join, reconciliation of
// gossip membership with the Raft configuration, and publishing leadership
// as events (Node.Leadership: leader known, established after Barrier,
// lost). It can also run a leader-only service while this node's term is
// established.
//
// The package is agnostic of what is replicated: it takes any raft.FSM and
// an optional LeaderService, and never speaks the public API.
package cluster
