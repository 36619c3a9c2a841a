//go:build raftqfault

package testcluster

import "github.com/raftq/raftq/raftgroup"

// Faults are the test faults of the node's data group and Raft port
// (raftgroup.Faults; test builds only).
func (n *Node) Faults() *raftgroup.Faults { return n.ClusterNode().Group().Faults() }
