package raftgroup

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/internal/damage"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
)

// portNode is one node of the tests of groups sharing a Raft port: its
// port and, by group id, its open groups and their FSMs.
type portNode struct {
	id     string
	dir    string
	mux    *raftmux.Mux
	groups map[string]*Group
	fsms   map[string]*testFSM
}

// groupDir is where n keeps group's state: the data group in the node's
// dir (the legacy layout), any other in a directory of its own.
func (n *portNode) groupDir(group string) string {
	if group == "data" {
		return n.dir
	}
	return filepath.Join(n.dir, group)
}

// open opens group on n's port on a new FSM (neither founded nor
// started).
func (n *portNode) open(t *testing.T, group string) *Group {
	t.Helper()
	n.fsms[group] = &testFSM{}
	g, err := Open(Config{Group: group, NodeID: n.id, Dir: n.groupDir(group), Port: n.mux,
		Preambles: func(raft.ServerAddress) bool { return true }, Logger: testLogger(),
		HeartbeatTimeout: testHeartbeat, ElectionTimeout: testHeartbeat, LeaderLeaseTimeout: testLease}, n.fsms[group])
	if err != nil {
		t.Fatalf("open %s on %s: %v", group, n.id, err)
	}
	n.groups[group] = g
	return g
}

// twoNodesOnePort starts nodes "a" and "b", each with one Raft port
// serving every group of groups, each group founded with both nodes as
// its voters. Cleanup closes every group, then the ports, and checks
// that no goroutine is left.
func twoNodesOnePort(t *testing.T, groups ...string) []*portNode {
	t.Helper()
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	var nodes []*portNode
	t.Cleanup(func() {
		for _, n := range nodes {
			for group, g := range n.groups {
				if err := g.Close(); err != nil { // idempotent: a test may have closed it
					t.Errorf("close %s on %s: %v", group, n.id, err)
				}
			}
			n.mux.Close()
		}
		harness.CheckNoLeaksWithin(t, base, 10*time.Second)
	})
	for _, id := range []string{"a", "b"} {
		p, err := harness.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		ln, adv, err := raftmux.Listen(ctxTimeout(t, 5*time.Second), fmt.Sprintf("127.0.0.1:%d", p[0]), "")
		if err != nil {
			t.Fatal(err)
		}
		mux, err := raftmux.New(ln, adv, raftmux.Config{Log: testLogger(), Legacy: "data"})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &portNode{id: id, dir: filepath.Join(dir, id), mux: mux, groups: map[string]*Group{}, fsms: map[string]*testFSM{}})
	}
	conf := raft.Configuration{}
	for _, n := range nodes {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.mux.Addr().String())})
	}
	for _, n := range nodes {
		for _, group := range groups {
			g := n.open(t, group)
			if err := g.Bootstrap(conf); err != nil {
				t.Fatalf("bootstrap %s on %s: %v", group, n.id, err)
			}
			g.Start()
		}
	}
	return nodes
}

// leaderOf waits for the node whose group leads.
func leaderOf(t *testing.T, nodes []*portNode, group string) *Group {
	t.Helper()
	var l *Group
	harness.Eventually(t, 20*time.Second, harness.Holds("a leader of "+group, func() bool {
		for _, n := range nodes {
			if g := n.groups[group]; g.LeaderReady() {
				l = g
				return true
			}
		}
		return false
	}))
	return l
}

// commit waits until entry is committed in group and applied on every
// node (both are voters: a commit needs both).
func commit(t *testing.T, nodes []*portNode, group, entry string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, harness.Holds(entry+" applied in "+group, func() bool {
		_, err := leaderOf(t, nodes, group).Apply(ctxTimeout(t, 5*time.Second), []byte(entry))
		return err == nil
	}))
	for _, n := range nodes {
		harness.Eventually(t, 10*time.Second, harness.Holds(entry+" on "+n.id, func() bool { return slices.Contains(n.fsms[group].Entries(), entry) }))
	}
}

// TestTwoGroupsOnePort: the runtime opens a second time in the same
// process, for another group id and directory, on the same Raft port (as
// the meta group will beside the data group): two nodes each run the
// groups "data" (the port's legacy group) and "meta", every group elects
// a leader and replicates its own log to the other node, the groups'
// states stay apart, and closing one group leaves the other serving.
func TestTwoGroupsOnePort(t *testing.T) {
	groups := []string{"data", "meta"}
	nodes := twoNodesOnePort(t, groups...)
	for _, group := range groups {
		commit(t, nodes, group, "in "+group)
	}
	for _, n := range nodes {
		for _, group := range groups {
			for _, e := range n.fsms[group].Entries() {
				if e != "in "+group {
					t.Errorf("%s's %s group applied %q", n.id, group, e)
				}
			}
		}
	}
	// The meta group closes on a; the data group on both keeps
	// committing over the port.
	if err := nodes[0].groups["meta"].Close(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, harness.Holds("data committing with meta closed on a", func() bool {
		_, err := leaderOf(t, nodes, "data").Apply(ctxTimeout(t, 5*time.Second), []byte("in data"))
		return err == nil
	}))
}

// TestQuarantineCutsOnlyItsGroup: a group that opens on corrupt state
// (its newest snapshot's metadata zeroed while it was closed) is
// quarantined with its own connections cut, and only those: the other
// group on the same port of the same two nodes keeps committing, which
// needs both nodes (two voters). Before, the quarantine cut the whole
// port, so one corrupt group stopped every group of the node. The
// quarantined group's own connections are still refused.
func TestQuarantineCutsOnlyItsGroup(t *testing.T) {
	for _, tc := range []struct{ corrupt, other string }{
		{corrupt: "meta", other: "data"},
		{corrupt: "data", other: "meta"}, // the legacy group
	} {
		t.Run(tc.corrupt, func(t *testing.T) {
			nodes := twoNodesOnePort(t, "data", "meta")
			b := nodes[1]
			for _, group := range []string{tc.corrupt, tc.other} {
				commit(t, nodes, group, "before")
			}
			if _, err := b.groups[tc.corrupt].Snapshot(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := b.groups[tc.corrupt].Close(); err != nil {
				t.Fatal(err)
			}
			metas, _ := filepath.Glob(filepath.Join(b.groupDir(tc.corrupt), "snapshots", "*", snapshotMetaFile))
			if len(metas) != 1 {
				t.Fatalf("snapshots' metadata: %v", metas)
			}
			damage.ZeroRange(t, metas[0], 0, 8)

			q := b.open(t, tc.corrupt)
			q.Start()
			if !q.Quarantined() {
				t.Fatalf("%s on b opened on damaged %s without quarantine", tc.corrupt, metas[0])
			}
			commit(t, nodes, tc.other, "with "+tc.corrupt+" quarantined on b")

			// b's port closes a peer's connection for the quarantined
			// group once its opening is read (uncut, raft would take it
			// and wait for the rest of the RPC).
			c, err := net.Dial("tcp", b.mux.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			opening, _ := raftmux.Encode(tc.corrupt)
			if _, err := c.Write(append(opening, 0)); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var ne net.Error
			if _, err := c.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("b's port kept a connection for the quarantined %s (read: %v)", tc.corrupt, err)
			}
			if len(b.fsms[tc.corrupt].Entries()) != 0 {
				t.Errorf("the quarantined %s applied %q", tc.corrupt, b.fsms[tc.corrupt].Entries())
			}
		})
	}
}
