package cluster

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/test/harness"
)

// gossipNet cuts gossip between in-process nodes: every node's memberlist
// transport drops what it sends to a gossip address cut off from its own
// (UDP packets vanish, TCP dials fail), which, done on both ends, is what
// the chaos harness's iptables DROP rules do to gossip.
type gossipNet struct {
	mu  sync.Mutex
	cut map[[2]string]bool // {from, to} gossip addresses
}

// tune returns a tuneGossip that gives the node a filtered transport.
func (g *gossipNet) tune(t *testing.T) func(*memberlist.Config) {
	return func(mc *memberlist.Config) {
		fastGossip(mc)
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger})
		if err != nil {
			t.Fatalf("gossip transport: %v", err)
		}
		mc.Transport = &cutTransport{NetTransport: nt, g: g, self: net.JoinHostPort(mc.BindAddr, fmt.Sprint(mc.BindPort))}
	}
}

// partition cuts a off from b, both ways; heal undoes every cut.
func (g *gossipNet) partition(a, b string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut[[2]string{a, b}], g.cut[[2]string{b, a}] = true, true
}

func (g *gossipNet) heal() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.cut)
}

func (g *gossipNet) blocked(from, to string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cut[[2]string{from, to}]
}

type cutTransport struct {
	*memberlist.NetTransport
	g    *gossipNet
	self string
}

func (c *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.g.blocked(c.self, addr) {
		return time.Now(), nil // dropped on the wire
	}
	return c.NetTransport.WriteTo(b, addr)
}

func (c *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.g.blocked(c.self, addr) {
		return nil, fmt.Errorf("dial %s: i/o timeout (cut off)", addr)
	}
	return c.NetTransport.DialTimeout(addr, timeout)
}

// WriteToAddress and DialAddressTimeout are what memberlist calls (the
// embedded NetTransport is a NodeAwareTransport).
func (c *cutTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return c.WriteTo(b, a.Addr)
}

func (c *cutTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return c.DialTimeout(a.Addr, timeout)
}

// TestGossipRecoversAfterPartition: a node cut off from the others' gossip
// long enough for memberlist to declare it dead, and past
// GossipToTheDeadTime, is seen alive and healthy again once the cut heals.
// memberlist alone never gets there: it probes and push-pulls only live
// members, and gossips to dead ones only while it has broadcasts queued,
// so both sides keep each other dead for good (the chaos run with seed
// 515864094650: n3 "unreachable" on the leader for the whole 60 s
// recovery bound after a partition-leader fault healed).
func TestGossipRecoversAfterPartition(t *testing.T) {
	base := runtime.NumGoroutine()
	g := &gossipNet{cut: map[[2]string]bool{}}
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	cfgs := map[string]nodeConfig{}
	ids := []string{"n1", "n2", "n3"}
	for _, id := range ids {
		cfg := testConfig(t, id, c.dir, 3)
		cfg.tuneGossip = g.tune(t)
		cfgs[id] = cfg
		c.seeds = append(c.seeds, cfg.GossipBind)
	}
	defer func() {
		c.shutdownAll()
		harness.CheckNoLeaksWithin(t, base, 10*time.Second)
	}()
	for _, id := range ids {
		c.start(cfgs[id])
	}
	c.waitVoters(15*time.Second, ids...)
	l := c.leader()
	var victim *testNode
	for _, n := range c.alive() {
		if n != l {
			victim = n
			break
		}
	}

	state := func(on *testNode, id string) (membership.MemberState, time.Time) {
		m, ok := on.ms.Records()[id]
		if !ok {
			return membership.Failed, time.Time{}
		}
		return m.State, m.Since
	}
	// Gossip only: Raft keeps its connections, so the leader stays and
	// what Status says of the victim is gossip's view alone.
	for _, n := range c.alive() {
		if n != victim {
			g.partition(victim.ms.Addr(), n.ms.Addr())
		}
	}
	deadFor := 2 * 5 * time.Second // twice fastGossip's GossipToTheDeadTime
	harness.Eventually(t, 30*time.Second, harness.Holds("every side to hold the other failed past GossipToTheDeadTime", func() bool {
		for _, n := range c.alive() {
			for _, o := range c.alive() {
				if (n == victim) == (o == victim) {
					continue
				}
				st, since := state(n, o.ID())
				if st != membership.Failed || time.Since(since) < deadFor {
					return false
				}
			}
		}
		return true
	}))
	g.heal()
	healed := time.Now()
	harness.Eventually(t, 3*defaultReconnectMax, harness.Holds("every node alive in every node's gossip, and healthy in the leader's status", func() bool {
		for _, n := range c.alive() {
			for _, o := range c.alive() {
				if st, _ := state(n, o.ID()); n != o && st != membership.Alive {
					return false
				}
			}
		}
		for _, ns := range l.Status().Nodes {
			if !ns.Healthy {
				return false
			}
		}
		return true
	}))
	t.Logf("gossip whole again %v after the heal", time.Since(healed).Round(time.Millisecond))
}
