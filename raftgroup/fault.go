//go:build raftqfault

package raftgroup

import "github.com/raftq/raftq/raftmux"

// Faults are the faults a test throws at a group and its node's Raft
// port (test builds only, -tags raftqfault). The port's faults cut or
// hold every group on it at once.
type Faults struct{ g *Group }

// Faults reaches the group's test faults.
func (g *Group) Faults() *Faults { return &Faults{g: g} }

// CutRaftNetwork cuts this node's Raft network off (cut true) or mends
// it (false). While cut, every Raft connection the node had is closed,
// it dials none and closes every one it accepts, so it neither hears nor
// reaches a peer over Raft; gossip and gRPC are untouched. A leader so
// cut keeps believing it leads until its LeaderLeaseTimeout passes
// without contact, as a paused process does until it runs again.
func (f *Faults) CutRaftNetwork(cut bool) { f.g.cfg.Port.Cut(cut) }

// HoldRaftNetwork holds this node's Raft network (hold true) or releases
// it (false), as a stopped process's is held: every read waits with the
// bytes it read, every write waits, until release, when all of it goes
// on at once. Unlike CutRaftNetwork nothing is closed, so answers to
// requests sent before the hold are processed after it, as a process
// resumed after SIGSTOP finds them in its sockets.
func (f *Faults) HoldRaftNetwork(hold bool) {
	if hold {
		f.g.cfg.Port.Hold(raftmux.AllTraffic)
	} else {
		f.g.cfg.Port.Release(raftmux.AllTraffic)
	}
}

// HoldRaftReads holds only what the node reads: its requests still go
// out, their answers wait.
func (f *Faults) HoldRaftReads() { f.g.cfg.Port.Hold(raftmux.AcceptedReads | raftmux.DialledReads) }

// ReleaseDialledRaft releases, of a held network, the writes and what
// this node reads on connections it dialled (its requests and their
// answers): the requests peers send it stay unread, as if delayed on the
// way.
func (f *Faults) ReleaseDialledRaft() { f.g.cfg.Port.Release(raftmux.DialledReads | raftmux.Writes) }

// HeldRaftReads is how many of the node's Raft reads wait, data in hand,
// for the hold to end.
func (f *Faults) HeldRaftReads() int64 { return f.g.cfg.Port.HeldReads() }

// ReadConfirmations counts VerifyLeader calls that went on to confirm
// leadership (a leader that knew it did not lead answers at once).
func (f *Faults) ReadConfirmations() int64 { return f.g.verifies.Load() }

// SettleRaftLoop makes Raft's main loop go round many times, so a request
// handed to it before (a leadership verification) has been taken up: the
// loop picks among ready requests at random, and each round trip here is
// one pick.
func (f *Faults) SettleRaftLoop() {
	for range 64 {
		_ = f.g.raft.GetConfiguration().Error()
	}
}

// ForceHeartbeats makes this leader send every follower a heartbeat now
// (raft's VerifyLeader), without waiting for the answers.
func (f *Faults) ForceHeartbeats() { _ = f.g.raft.VerifyLeader() }

// TransferTries counts the leadership transfers the group asked of raft
// (TransferLeadership asks again after a timeout).
func (f *Faults) TransferTries() int64 { return f.g.transferTries.Load() }

// TransferTimeouts is how many of them timed out (or found the previous
// one still in progress).
func (f *Faults) TransferTimeouts() int64 { return f.g.transferTimeouts.Load() }
