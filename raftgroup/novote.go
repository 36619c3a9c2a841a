package raftgroup

import (
	"log/slog"

	"github.com/hashicorp/raft"
)

// voteGuard stands between the Raft transport and Raft: a node with no
// Raft state (no log entry, no snapshot, so no configuration) refuses
// votes and pre-votes; every other RPC passes through unchanged.
//
// Why: Raft's safety assumes a voter never forgets its term and vote, but
// a disk can be lost, and raftq empties a data dir on purpose
// (RequestWipe). hashicorp/raft grants votes while its configuration is
// empty, taking that for a cluster about to bootstrap, so a voter that
// came back empty under its old id could vote a second time in a term it
// had already voted in: the chaos campaign elected two leaders in one
// term that way (test/chaos/DESIGN.md, seed 264548056401) and lost
// acknowledged messages.
//
// One vote of an empty node is still needed: a --bootstrap-expect founder
// that bootstrapped first makes the others see its state in gossip, and
// they then wait for its log instead of bootstrapping too, so its first
// election needs their votes. Such a candidate's log is the bootstrap
// entry alone (index 1, term 1), and a node whose data dir records a
// cluster id (one set aside by RequestWipe) is no founder, so an empty
// node leaves to Raft exactly the votes of bare-bootstrap candidates,
// unless its dir records a cluster. A voter that lost its disk is refused
// by every candidate that ever saw a leader's entry; see cluster/DESIGN.md
// ("Votes of an empty node") for what remains.
//
// The node votes normally once a leader has sent it entries or a snapshot
// (LastIndex > 0). That only moves forward, so checking here and letting
// Raft answer a moment later never lets a refused vote through.
type voteGuard struct {
	in  <-chan raft.RPC // the network transport's consumer
	out chan raft.RPC   // Raft's consumer (voteGuard.Consumer)
	log *slog.Logger
	// logged is the refusal logged last (only run's goroutine uses it).
	logged refusal
}

// refusal names a refusal logged.
type refusal struct {
	candidate string
	term      uint64
}

func newVoteGuard(in <-chan raft.RPC, log *slog.Logger) *voteGuard {
	return &voteGuard{in: in, out: make(chan raft.RPC), log: log}
}

// Consumer is what Raft reads its RPCs from.
func (g *voteGuard) Consumer() <-chan raft.RPC { return g.out }

// run passes RPCs from the transport to r, answering refused votes
// itself, until done is closed (Raft has shut down). recorded reports
// whether the data dir records a cluster id.
func (g *voteGuard) run(r *raft.Raft, local raft.ServerID, trans raft.Transport, recorded func() bool, done <-chan struct{}) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-g.in:
		case <-done:
			return
		}
		if r.LastIndex() == 0 && g.refuse(r, local, trans, recorded, rpc) {
			continue
		}
		select {
		case g.out <- rpc:
		case <-done:
			// The transport gives up on the RPC when it shuts down.
			return
		}
	}
}

// refuse answers rpc with a refusal if it asks for a vote or pre-vote
// this stateless node must not give. The answer carries our current term
// and changes nothing here: no term is taken from the candidate and no
// vote is recorded.
func (g *voteGuard) refuse(r *raft.Raft, local raft.ServerID, trans raft.Transport, recorded func() bool, rpc raft.RPC) bool {
	var candidate []byte
	var term, lastIndex, lastTerm uint64
	prevote := false
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		candidate, term, lastIndex, lastTerm = req.ID, req.Term, req.LastLogIndex, req.LastLogTerm
	case *raft.RequestPreVoteRequest:
		candidate, term, lastIndex, lastTerm, prevote = req.ID, req.Term, req.LastLogIndex, req.LastLogTerm, true
	default:
		return false
	}
	if lastIndex == 1 && lastTerm == 1 && !recorded() {
		return false // a founder's first election
	}
	header := raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(local),
		Addr:            trans.EncodePeer(local, trans.LocalAddr()),
	}
	if prevote {
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: header, Term: r.CurrentTerm(), Granted: false}, nil)
	} else {
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: header, Term: r.CurrentTerm(), Granted: false}, nil)
	}
	// Once per candidate and term: a candidate retries every election
	// timeout, with a pre-vote and a vote each time.
	if key := (refusal{string(candidate), term}); key != g.logged {
		g.logged = key
		g.log.Warn("refused a vote: this node has no Raft state (a new or wiped data dir) and may have voted in this term before it lost it; it votes again once a leader has sent it its log",
			"candidate", string(candidate), "term", term, "prevote", prevote)
	}
	return true
}
