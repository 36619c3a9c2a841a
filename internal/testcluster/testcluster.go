// Package testcluster builds in-process raftq nodes and clusters for
// tests, through host.New as raftq serve builds a node: loopback ports
// reserved with test/harness.FreePorts (so a restarted node gets its own
// back), a data dir per node (kept across a Restart), TLS from a test CA
// (PKI) when asked, and one stop that checks no goroutine is left behind
// (harness.CheckNoLeaks). Waiting uses harness.WaitFor and
// harness.Eventually: one wait, one port picker and one leak check for
// every in-process test.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/host"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Raft timing: the production defaults. Shorter timeouts (500/250 ms)
// made a loaded 2-core machine under -race depose leaders in the middle of
// steps that assert exact codes; leadership changes a test wants come
// from TransferLeadership, which does not wait for a timeout.
const (
	Heartbeat = time.Second
	Lease     = 500 * time.Millisecond
	// PromoteAfter: a joining node is a nonvoter at least this long
	// (long enough for a test polling the configuration to see it).
	PromoteAfter = 500 * time.Millisecond
)

// Addrs are the loopback addresses a node binds.
type Addrs struct{ GRPC, Raft, Gossip string }

// FreeAddrs reserves a node's three ports (harness.FreePorts: free for
// TCP and UDP, never handed out twice on the machine while this process
// runs).
func FreeAddrs() (Addrs, error) {
	p, err := harness.FreePorts(3)
	if err != nil {
		return Addrs{}, err
	}
	at := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	return Addrs{GRPC: at(p[0]), Raft: at(p[1]), Gossip: at(p[2])}, nil
}

// Config is node id's host configuration for a test: data under dir/id,
// bound at at, expecting expect founders, joining join, with the test
// Raft timing and no HTTP port. Callers adjust it before host.New.
func Config(id, dir string, at Addrs, expect int, join []string, log *slog.Logger) host.Config {
	return host.Config{
		Node: broker.Config{
			Cluster: cluster.Config{
				NodeID:             id,
				DataDir:            filepath.Join(dir, id),
				GossipBind:         at.Gossip,
				GRPCAdvertise:      at.GRPC,
				Version:            "build-of-" + id,
				Join:               join,
				BootstrapExpect:    expect,
				DeadNodeTimeout:    time.Minute,
				HeartbeatTimeout:   Heartbeat,
				ElectionTimeout:    Heartbeat,
				LeaderLeaseTimeout: Lease,
				PromoteAfter:       PromoteAfter,
			},
		},
		GRPCAddr: at.GRPC,
		RaftAddr: at.Raft,
		Logger:   log.With("node", id),
	}
}

// Logger is quiet (a shutdown logs expected errors) unless RAFTQ_TEST_LOG
// is set.
func Logger() *slog.Logger {
	level := slog.LevelError + 4
	if os.Getenv("RAFTQ_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Options shape a cluster.
type Options struct {
	Nodes  int
	Expect int          // BootstrapExpect (default: Nodes)
	Logger *slog.Logger // nil = Logger()
	// Adjust, if set, changes each node's configuration (by node id)
	// before it starts, and again when it restarts.
	Adjust func(id string, c *host.Config)
	// NoWait: do not wait for a stable leader.
	NoWait bool
	// TLS, if set, runs every node's ports over TLS with a node
	// certificate of this CA (host.Config.TLS); the clients in Node trust
	// it and present no certificate.
	TLS *PKI
}

// Node is one in-process node and a client connection to it (plaintext,
// or trusting Options.TLS).
type Node struct {
	ID      string
	Addrs   Addrs
	DataDir string
	Host    *host.Host
	Conn    *grpc.ClientConn
	Broker  raftqv1.BrokerClient
	Admin   raftqv1.ClusterClient
}

// State is the node's replicated state machine.
func (n *Node) State() *fsm.FSM { return n.Host.Broker().State() }

// ClusterNode is the node's Raft and membership node.
func (n *Node) ClusterNode() *cluster.Node { return n.Host.Broker().Node() }

// API is the node's gRPC server (and the HTTP port's handler).
func (n *Node) API() *transport.Server { return n.Host.API() }

// Cluster is a set of nodes started by Start and stopped when the test
// ends.
type Cluster struct {
	t     testing.TB
	o     Options
	dir   string
	Nodes []*Node
	base  int // goroutines before the cluster started
	down  bool
}

// Start starts o.Nodes nodes (the first is the gossip seed), waits for a
// stable leader (unless o.NoWait) and registers a cleanup that stops
// every node and checks no goroutine is left behind.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Expect == 0 {
		o.Expect = o.Nodes
	}
	if o.Logger == nil {
		o.Logger = Logger()
	}
	c := &Cluster{t: t, o: o, base: runtime.NumGoroutine()}
	// TempDir before Cleanup: cleanups run last-registered first, and the
	// nodes must stop before TempDir's RemoveAll runs.
	c.dir = t.TempDir()
	t.Cleanup(c.Stop)
	for i := range o.Nodes {
		var join []string
		if i > 0 {
			join = []string{c.Nodes[0].Addrs.Gossip}
		}
		at, err := FreeAddrs()
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, c.start(fmt.Sprintf("n%d", i+1), at, join))
	}
	if !o.NoWait {
		c.WaitStable(20 * time.Second)
	}
	return c
}

func (c *Cluster) start(id string, at Addrs, join []string) *Node {
	c.t.Helper()
	cfg := Config(id, c.dir, at, c.o.Expect, join, c.o.Logger)
	creds := insecure.NewCredentials()
	if c.o.TLS != nil {
		cfg.TLS = c.o.TLS.Source(c.t, id)
		creds = c.o.TLS.ClientCreds(c.t, "")
	}
	if c.o.Adjust != nil {
		c.o.Adjust(id, &cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg)
	if err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	n := &Node{ID: id, Addrs: at, DataDir: cfg.Node.Cluster.DataDir, Host: h}
	if n.Conn, err = grpc.NewClient(h.GRPCAddr(), grpc.WithTransportCredentials(creds)); err != nil {
		c.t.Fatal(err)
	}
	n.Broker, n.Admin = raftqv1.NewBrokerClient(n.Conn), raftqv1.NewClusterClient(n.Conn)
	return n
}

// Restart stops n as a process that ends (it stays a member) and starts
// a node with its id on its data dir and its addresses, joining through
// the other nodes; the new node takes n's place in Nodes.
func (c *Cluster) Restart(n *Node) *Node {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.Conn.Close()
	if err := n.Host.Close(ctx); err != nil {
		c.t.Errorf("%s: stop: %v", n.ID, err)
	}
	var join []string
	for _, o := range c.Nodes {
		if o != n {
			join = append(join, o.Addrs.Gossip)
		}
	}
	m := c.start(n.ID, n.Addrs, join)
	for i := range c.Nodes {
		if c.Nodes[i] == n {
			c.Nodes[i] = m
		}
	}
	return m
}

// WaitStable waits until one node leads (its Barrier done), every node
// knows it with its gRPC address, and the leader's configuration holds
// every node as a voter; it returns the leader.
func (c *Cluster) WaitStable(timeout time.Duration) *Node {
	c.t.Helper()
	var l *Node
	harness.Eventually(c.t, timeout, func() error {
		l = nil
		for _, n := range c.Nodes {
			if n.Host.Broker().Node().Group().LeaderReady() {
				l = n
			}
		}
		if l == nil {
			return errors.New("no ready leader")
		}
		for _, n := range c.Nodes {
			if li := n.Host.Broker().Node().Group().Leadership(); li.LeaderID != l.ID || li.LeaderGRPCAddr != l.Addrs.GRPC {
				return fmt.Errorf("%s sees leader %+v, want %s at %s", n.ID, li, l.ID, l.Addrs.GRPC)
			}
		}
		voters := 0
		for _, ns := range l.Host.Broker().Node().Status().Nodes {
			if ns.Suffrage == "voter" {
				voters++
			}
		}
		if voters != len(c.Nodes) {
			return fmt.Errorf("%d voters of %d nodes", voters, len(c.Nodes))
		}
		if l.State().Reader().ClusterVersion() >= fsm.HandoverVersion {
			return c.metaReady()
		}
		return nil
	})
	return l
}

// metaReady: every node's meta replica is seeded and knows meta's leader,
// so identity and settings writes (served by meta from the handover) go
// through at once.
func (c *Cluster) metaReady() error {
	for _, n := range c.Nodes {
		m := n.Host.Meta()
		if !m.FSM().Seeded() {
			return fmt.Errorf("%s: meta group not seeded yet", n.ID)
		}
		if l := m.Raft().Leadership(); !l.LeaderKnown() || l.LeaderGRPCAddr == "" {
			return fmt.Errorf("%s knows no meta leader", n.ID)
		}
	}
	return nil
}

// Leader is the node that leads, waiting (bounded) through an election.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	var l *Node
	harness.Eventually(c.t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			if n.Host.Broker().Node().Group().IsLeader() {
				l = n
				return nil
			}
		}
		return errors.New("no node leads")
	})
	return l
}

// Followers are the nodes other than the leader (Leader).
func (c *Cluster) Followers() []*Node {
	c.t.Helper()
	l := c.Leader()
	var out []*Node
	for _, n := range c.Nodes {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// ByID is the node with id; it fails the test if there is none.
func (c *Cluster) ByID(id string) *Node {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// Synced waits until every node has applied what the leader has applied.
func (c *Cluster) Synced() {
	c.t.Helper()
	idx := c.Leader().State().Reader().AppliedIndex()
	// And meta's replicas what meta's leader has (none before the
	// handover).
	var metaIdx uint64
	for _, n := range c.Nodes {
		if n.Host.Meta().Raft().IsLeader() {
			metaIdx = n.Host.Meta().FSM().AppliedIndex()
		}
	}
	harness.Eventually(c.t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			if got := n.State().Reader().AppliedIndex(); got < idx {
				return fmt.Errorf("replicas to catch up: %s applied %d of %d", n.ID, got, idx)
			}
			if got := n.Host.Meta().FSM().AppliedIndex(); got < metaIdx {
				return fmt.Errorf("meta replicas to catch up: %s applied %d of %d", n.ID, got, metaIdx)
			}
		}
		return nil
	})
}

// Digests returns every node's state digest (StateDigest) once the
// replicas caught up (Synced); it fails the test if they differ.
func (c *Cluster) Digests() string {
	c.t.Helper()
	c.Synced()
	first := ""
	for _, n := range c.Nodes {
		d := StateDigest(c.t, n.State())
		if first == "" {
			first = d
		} else if d != first {
			c.t.Fatalf("replica %s digest %s differs from %s's %s", n.ID, d, c.Nodes[0].ID, first)
		}
	}
	return first
}

// WaitClusterVersion waits until every node applies at least version v.
func (c *Cluster) WaitClusterVersion(v uint32) {
	c.t.Helper()
	harness.Eventually(c.t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			if got := n.State().Reader().ClusterVersion(); got < v {
				return fmt.Errorf("%s at cluster version %d, want %d", n.ID, got, v)
			}
		}
		if v >= fsm.HandoverVersion {
			return c.metaReady()
		}
		return nil
	})
}

// Stop closes the clients and stops every node, followers first (so the
// leader's stop finds a quorum gone last), then checks that no goroutine
// is left behind. The test's cleanup calls it; calling it earlier is
// fine.
func (c *Cluster) Stop() {
	if c.down {
		return
	}
	c.down = true
	t := c.t
	// The nodes still run on their data dirs: if these are gone, a cleanup
	// removed them under live nodes (see Start).
	if _, err := os.Stat(c.dir); err != nil {
		t.Errorf("data dir removed before the nodes stopped: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		n.Conn.Close()
	}
	var order []*Node
	for _, lead := range []bool{false, true} {
		for _, n := range c.Nodes {
			if n.Host.Broker().Node().Group().IsLeader() == lead {
				order = append(order, n)
			}
		}
	}
	for _, n := range order {
		if err := n.Host.Close(ctx); err != nil {
			t.Errorf("%s: stop: %v", n.ID, err)
		}
	}
	harness.CheckNoLeaks(t, c.base)
}
