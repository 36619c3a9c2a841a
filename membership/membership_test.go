package membership

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
		want         MemberState
	}{
		{"the leaving process refutes a false failure", true, Left},
		{"a new process joins on the same id", false, Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Membership{log: slog.New(slog.DiscardHandler), members: map[string]*Record{}, changed: make(chan struct{}), authLeaves: true}
			node := func(leaving bool) *memberlist.Node {
				b, err := json.Marshal(Meta{ID: "n4", Raft: "127.0.0.1:1", Leaving: leaving, IDs: true})
				if err != nil {
					t.Fatal(err)
				}
				return &memberlist.Node{Name: "n4", Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: b}
			}
			m.update(node(false), Alive, true)
			m.AuthenticatedLeave("n4")
			m.update(node(true), Failed, false) // declared dead under load
			if st := m.Records()["n4"].State; st != Left {
				t.Fatalf("after the authenticated leave and a failure: %v, want left", st)
			}
			m.update(node(tc.joinsLeaving), Alive, true) // alive again
			m.update(node(tc.joinsLeaving), Failed, false)
			if st := m.Records()["n4"].State; st != tc.want {
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
	m := &Membership{log: slog.New(slog.DiscardHandler), members: map[string]*Record{}, changed: make(chan struct{}), authLeaves: true}
	node := func(run string) *memberlist.Node {
		b, err := json.Marshal(Meta{ID: "n2", Raft: "127.0.0.1:1", State: true, IDs: true, Run: run})
		if err != nil {
			t.Fatal(err)
		}
		return &memberlist.Node{Name: "n2", Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: b}
	}
	m.update(node("run-1"), Alive, true)
	m.PreventAdd("n2")
	m.update(node("run-1"), Alive, false) // the same process, updating its metadata
	if !m.Records()["n2"].NoAdd {
		t.Fatal("an update of the removed process made it addable")
	}
	m.update(node("run-2"), Alive, false) // a new process, back before gossip saw it go
	if m.Records()["n2"].NoAdd {
		t.Fatal("the restarted member is still kept out")
	}
}
