package cluster

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
)

// openings counts how the connections a node's Raft port accepted open.
// With refuse it also closes one that opens with a preamble, as the raft
// of a build before the multiplexer does (0xF1 is no RPC type it knows).
type openings struct {
	refuse              bool
	preambles, legacies atomic.Int64
	refused             atomic.Int64
}

func (o *openings) wrap(ln net.Listener) net.Listener { return &openingListener{Listener: ln, o: o} }

type openingListener struct {
	net.Listener
	o *openings
}

func (l *openingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &openingConn{Conn: c, o: l.o}, nil
}

// openingConn sees the first byte of a plain TCP connection (the tests
// below run without TLS, so the byte is the opening).
type openingConn struct {
	net.Conn
	o    *openings
	seen bool
}

func (c *openingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 0 || c.seen {
		return n, err
	}
	c.seen = true
	switch {
	case p[0] == raftmux.PreambleByte && c.o.refuse:
		c.o.refused.Add(1)
		c.Conn.Close()
		return 0, io.EOF
	case p[0] == raftmux.PreambleByte:
		c.o.preambles.Add(1)
	default:
		c.o.legacies.Add(1)
	}
	return n, err
}

// TestRaftPortMixedBuilds: nodes whose Raft port is a multiplexer run in
// one cluster with nodes of a build before it (simulated: they advertise
// no preambles, send none, and drop a connection that opens with one).
// A node with the multiplexer dials a peer that advertises it with a
// preamble naming the data group and an old one without; an old leader
// reaches the new nodes without one; every entry reaches every node.
func TestRaftPortMixedBuilds(t *testing.T) {
	base := runtime.NumGoroutine()
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	cfgs := map[string]nodeConfig{}
	seen := map[string]*openings{}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		cfg := testConfig(t, id, c.dir, 3)
		o := &openings{}
		if id == "n3" || id == "n5" { // the old build
			cfg.noMux, o.refuse = true, true
		}
		cfg.wrapRaftListener = o.wrap
		cfgs[id], seen[id] = cfg, o
		if id <= "n3" {
			c.seeds = append(c.seeds, cfg.GossipBind)
		}
	}
	defer func() {
		c.shutdownAll()
		harness.CheckNoLeaksWithin(t, base, 10*time.Second)
	}()
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	replicated := func(t *testing.T, entry string) {
		t.Helper()
		applyRetry(t, c, entry)
		for _, n := range c.alive() {
			harness.Eventually(t, 10*time.Second, harness.Holds(entry+" on "+n.ID(), func() bool { return slices.Contains(n.fsm.Entries(), entry) }))
		}
	}
	// lead makes id the leader: a transfer can time out on a loaded
	// machine, and leadership can move on its own; it is tried again.
	lead := func(t *testing.T, id string) *testNode {
		t.Helper()
		harness.Eventually(t, 60*time.Second, harness.Holds(id+" to lead", func() bool {
			l := c.leader()
			if l.ID() == id {
				return true
			}
			_, _ = l.TransferLeadership(ctxTimeout(t, 10*time.Second), id)
			return false
		}))
		return c.nodes[id]
	}
	noPreambleToOld := func(t *testing.T) {
		t.Helper()
		for _, id := range []string{"n3", "n5"} {
			if n := seen[id].refused.Load(); n != 0 {
				t.Errorf("%d connections to %s (an old build) opened with a preamble", n, id)
			}
		}
	}

	step("two new nodes and an old one form a cluster", func(t *testing.T) {
		for _, id := range []string{"n1", "n2", "n3"} {
			c.start(cfgs[id])
		}
		c.waitVoters(30*time.Second, "n1", "n2", "n3")
		replicated(t, "a")
		noPreambleToOld(t)
		n1 := c.nodes["n1"]
		harness.Eventually(t, 10*time.Second, harness.Holds("n1's gossip to know who takes preambles", func() bool {
			return n1.ms.PreamblesAt(raft.ServerAddress(c.nodes["n2"].RaftAddr())) &&
				!n1.ms.PreamblesAt(raft.ServerAddress(c.nodes["n3"].RaftAddr()))
		}))
		if m, ok := n1.ms.MetaOf("n3"); !ok || m.Mux {
			t.Errorf("n3's metadata %+v (known %v) advertises preambles", m, ok)
		}
		if n1.ms.PreamblesAt("127.0.0.1:1") {
			t.Error("preambles to an address gossip does not know")
		}
	})

	step("a new leader dials a new node with a preamble and an old one without", func(t *testing.T) {
		lead(t, "n1")
		// A leader adds them once gossip told it their Raft addresses, and
		// so whether they take preambles: its first dial to each knows.
		c.start(cfgs["n4"])
		c.start(cfgs["n5"])
		c.waitVoters(30*time.Second, "n1", "n2", "n3", "n4", "n5")
		replicated(t, "b")
		// Any dial of a new node to n4 opens with a preamble; while a new
		// node leads, one does.
		harness.Eventually(t, 60*time.Second, harness.Holds("n4 dialled with a preamble", func() bool {
			if seen["n4"].preambles.Load() > 0 {
				return true
			}
			if l := c.leader(); l.ID() == "n3" || l.ID() == "n5" {
				_, _ = l.TransferLeadership(ctxTimeout(t, 10*time.Second), "n1")
			}
			return false
		}))
		if n := seen["n5"].legacies.Load(); n == 0 {
			t.Error("n5 (old) was never dialled")
		}
		noPreambleToOld(t)
	})

	step("an old leader reaches the new nodes without a preamble", func(t *testing.T) {
		// Committed by n3 as leader: a quorum of five, so at least one new
		// node, took it from an old leader. Tried again if leadership
		// moved meanwhile (a new entry: the last may still commit).
		entry := ""
		for i := 0; entry == ""; i++ {
			e := fmt.Sprintf("c%d", i)
			if _, err := lead(t, "n3").Apply(ctxTimeout(t, 10*time.Second), []byte(e)); err == nil {
				entry = e
			} else if i == 20 {
				t.Fatalf("n3 could not apply: %v", err)
			}
		}
		for _, n := range c.alive() {
			harness.Eventually(t, 10*time.Second, harness.Holds(entry+" on "+n.ID(), func() bool { return slices.Contains(n.fsm.Entries(), entry) }))
		}
		noPreambleToOld(t)
	})
}
