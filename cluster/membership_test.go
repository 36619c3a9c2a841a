package cluster

import (
	"encoding/json"
	"log/slog"
	"net"
	"testing"

	"github.com/hashicorp/memberlist"
)

// TestAuthenticatedLeaveSurvivesRefute: with TLS only a leave announced
// over mutual TLS counts. Under load, memberlist may declare the leaving
// node dead before its gossip leave, and the node refutes that (alive
// again: a join event) while it is still leaving. That refute must not
// undo the authenticated leave, or the leader re-adds the node and, once
// it leaves gossip, keeps it as a failed voter for DeadNodeTimeout
// (TestTLSCluster's "did not remove it" flake). A new process on that id
// (advertising no leave) starts afresh.
func TestAuthenticatedLeaveSurvivesRefute(t *testing.T) {
	for _, tc := range []struct {
		name         string
		joinsLeaving bool // the join's metadata advertises Leaving
		want         memberState
	}{
		{"the leaving process refutes a false failure", true, memberLeft},
		{"a new process joins on the same id", false, memberFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &membership{log: slog.New(slog.DiscardHandler), members: map[string]*member{}, changed: make(chan struct{}), authLeaves: true}
			node := func(leaving bool) *memberlist.Node {
				b, err := json.Marshal(nodeMeta{ID: "n4", Raft: "127.0.0.1:1", Leaving: leaving, IDs: true})
				if err != nil {
					t.Fatal(err)
				}
				return &memberlist.Node{Name: "n4", Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: b}
			}
			m.update(node(false), memberAlive, true)
			m.authenticatedLeave("n4")
			m.update(node(true), memberFailed, false) // declared dead under load
			if st := m.snapshot()["n4"].state; st != memberLeft {
				t.Fatalf("after the authenticated leave and a failure: %v, want left", st)
			}
			m.update(node(tc.joinsLeaving), memberAlive, true) // alive again
			m.update(node(tc.joinsLeaving), memberFailed, false)
			if st := m.snapshot()["n4"].state; st != tc.want {
				t.Fatalf("gone after the join: %v, want %v", st, tc.want)
			}
		})
	}
}

// TestRestartedMemberIsAddableAgain: an operator's RemoveNode keeps a
// live member out of the configuration until it restarts. A restart
// quicker than gossip's failure detection is never a gossip join (the new
// process refutes the suspicion of the old one), so the new process is
// told by its metadata's run id: with the old one, the chaos campaign's
// membership fault found a removed node started again on its data dir
// kept out for good.
func TestRestartedMemberIsAddableAgain(t *testing.T) {
	m := &membership{log: slog.New(slog.DiscardHandler), members: map[string]*member{}, changed: make(chan struct{}), authLeaves: true}
	node := func(run string) *memberlist.Node {
		b, err := json.Marshal(nodeMeta{ID: "n2", Raft: "127.0.0.1:1", State: true, IDs: true, Run: run})
		if err != nil {
			t.Fatal(err)
		}
		return &memberlist.Node{Name: "n2", Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: b}
	}
	m.update(node("run-1"), memberAlive, true)
	m.preventAdd("n2")
	m.update(node("run-1"), memberAlive, false) // the same process, updating its metadata
	if !m.snapshot()["n2"].noAdd {
		t.Fatal("an update of the removed process made it addable")
	}
	m.update(node("run-2"), memberAlive, false) // a new process, back before gossip saw it go
	if m.snapshot()["n2"].noAdd {
		t.Fatal("the restarted member is still kept out")
	}
}
