//go:build raftqfault

package cluster

import "net"

// Test builds only (-tags raftqfault): faults a test throws at a node.

// CutRaftNetwork cuts this node's Raft network off (cut true) or mends
// it (false). While cut, every Raft connection the node had is closed,
// it dials none and closes every one it accepts, so it neither hears nor
// reaches a peer over Raft; gossip and gRPC are untouched. A leader so
// cut keeps believing it leads until its LeaderLeaseTimeout passes
// without contact, as a paused process does until it runs again.
func (n *Node) CutRaftNetwork(cut bool) {
	s := n.stream
	s.cut.Store(cut)
	if !cut {
		return
	}
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
