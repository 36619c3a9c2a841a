package raftgroup

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
)

// TestTwoGroupsOnePort: the runtime opens a second time in the same
// process, for another group id and directory, on the same Raft port (as
// the meta group will beside the data group): two nodes each run the
// groups "data" (the port's legacy group) and "meta", every group elects
// a leader and replicates its own log to the other node, the groups'
// states stay apart, and closing one group leaves the other serving.
func TestTwoGroupsOnePort(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	always := func(raft.ServerAddress) bool { return true }
	type node struct {
		id     string
		mux    *raftmux.Mux
		groups map[string]*Group
		fsms   map[string]*testFSM
	}
	var nodes []*node
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
		nodes = append(nodes, &node{id: id, mux: mux, groups: map[string]*Group{}, fsms: map[string]*testFSM{}})
	}
	conf := raft.Configuration{}
	for _, n := range nodes {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.mux.Addr().String())})
	}
	groups := []string{"data", "meta"}
	for _, n := range nodes {
		for _, group := range groups {
			// The data group in the node's dir (the legacy layout), meta
			// in a directory of its own.
			gdir := filepath.Join(dir, n.id)
			if group != "data" {
				gdir = filepath.Join(gdir, group)
			}
			n.fsms[group] = &testFSM{}
			g, err := Open(Config{Group: group, NodeID: n.id, Dir: gdir, Port: n.mux, Preambles: always, Logger: testLogger(),
				HeartbeatTimeout: testHeartbeat, ElectionTimeout: testHeartbeat, LeaderLeaseTimeout: testLease}, n.fsms[group])
			if err != nil {
				t.Fatalf("open %s on %s: %v", group, n.id, err)
			}
			n.groups[group] = g
			if err := g.Bootstrap(conf); err != nil {
				t.Fatalf("bootstrap %s on %s: %v", group, n.id, err)
			}
			g.Start()
		}
	}
	closed := map[string]bool{}
	defer func() {
		for _, n := range nodes {
			for group, g := range n.groups {
				if !closed[n.id+"/"+group] {
					if err := g.Close(); err != nil {
						t.Errorf("close %s on %s: %v", group, n.id, err)
					}
				}
			}
			n.mux.Close()
		}
		harness.CheckNoLeaksWithin(t, base, 10*time.Second)
	}()
	leader := func(group string) *Group {
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
	for _, group := range groups {
		entry := "in " + group
		harness.Eventually(t, 20*time.Second, harness.Holds(entry+" applied", func() bool {
			_, err := leader(group).Apply(ctxTimeout(t, 5*time.Second), []byte(entry))
			return err == nil
		}))
		for _, n := range nodes {
			harness.Eventually(t, 10*time.Second, harness.Holds(entry+" on "+n.id, func() bool { return slices.Contains(n.fsms[group].Entries(), entry) }))
		}
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
	closed["a/meta"] = true
	harness.Eventually(t, 20*time.Second, harness.Holds("data committing with meta closed on a", func() bool {
		_, err := leader("data").Apply(ctxTimeout(t, 5*time.Second), []byte("in data"))
		return err == nil
	}))
}
