//go:build raftqfault

package cluster

import "github.com/raftq/raftq/raftmux"

// Test builds only (-tags raftqfault): faults a test throws at a node.

// CutRaftNetwork cuts this node's Raft network off (cut true) or mends
// it (false). While cut, every Raft connection the node had is closed,
// it dials none and closes every one it accepts, so it neither hears nor
// reaches a peer over Raft; gossip and gRPC are untouched. A leader so
// cut keeps believing it leads until its LeaderLeaseTimeout passes
// without contact, as a paused process does until it runs again.
func (n *Node) CutRaftNetwork(cut bool) { n.mux.Cut(cut) }

// HoldRaftNetwork holds this node's Raft network (hold true) or releases
// it (false), as a stopped process's is held: every read waits with the
// bytes it read, every write waits, until release, when all of it goes
// on at once. Unlike CutRaftNetwork nothing is closed, so answers to
// requests sent before the hold are processed after it, as a process
// resumed after SIGSTOP finds them in its sockets.
func (n *Node) HoldRaftNetwork(hold bool) {
	if hold {
		n.mux.Hold(raftmux.AllTraffic)
	} else {
		n.mux.Release(raftmux.AllTraffic)
	}
}

// HoldRaftReads holds only what the node reads: its requests still go
// out, their answers wait.
func (n *Node) HoldRaftReads() { n.mux.Hold(raftmux.AcceptedReads | raftmux.DialledReads) }

// ReleaseDialledRaft releases, of a held network, the writes and what
// this node reads on connections it dialled (its requests and their
// answers): the requests peers send it stay unread, as if delayed on the
// way.
func (n *Node) ReleaseDialledRaft() { n.mux.Release(raftmux.DialledReads | raftmux.Writes) }

// HeldRaftReads is how many of the node's Raft reads wait, data in hand,
// for the hold to end.
func (n *Node) HeldRaftReads() int64 { return n.mux.HeldReads() }

// ReadConfirmations counts VerifyLeader calls that went on to confirm
// leadership (a leader that knew it did not lead answers at once).
func (n *Node) ReadConfirmations() int64 { return n.verifies.Load() }

// SettleRaftLoop makes Raft's main loop go round many times, so a request
// handed to it before (a leadership verification) has been taken up: the
// loop picks among ready requests at random, and each round trip here is
// one pick.
func (n *Node) SettleRaftLoop() {
	for range 64 {
		_ = n.raft.GetConfiguration().Error()
	}
}

// ForceHeartbeats makes this leader send every follower a heartbeat now
// (raft's VerifyLeader), without waiting for the answers.
func (n *Node) ForceHeartbeats() { _ = n.raft.VerifyLeader() }
