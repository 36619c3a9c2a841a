package transport

// Helpers for in-process cluster tests (DESIGN testing tier 3): one node
// built by the composition root (broker.New, as cmd/raftq serve builds it)
// plus a transport.Server per node, over loopback with short Raft timeouts.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/peers"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/tlsconfig"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Raft timing: the production defaults. Shorter timeouts (500/250 ms)
// made a loaded 2-core machine under -race depose leaders in the middle of
// steps that assert exact codes; leadership changes the tests want come
// from TransferLeadership, which does not wait for a timeout.
const (
	ipHeartbeat = time.Second
	ipLease     = 500 * time.Millisecond
	// ipPromoteAfter: a joining node is a nonvoter at least this long
	// (long enough for a test polling the configuration to see it).
	ipPromoteAfter = 500 * time.Millisecond
)

type inprocOpts struct {
	nodes          int
	expect         int           // BootstrapExpect (default: nodes)
	maxQueuedBytes int64         // broker.Config.MaxQueuedBytes
	leaderWait     time.Duration // transport.Config.LeaderWait (0 = default)
	noWait         bool          // do not wait for a leader
	audit          broker.AuditConfig
	// replicaCheck is broker.Config.ReplicaCheckInterval; 0 = off here, because
	// tests compare replicas at quiet moments and a background
	// Checkpoint entry lets time pass (delays, TTLs) on some first.
	replicaCheck time.Duration
	logs         *logBuffer // if set, every node's warnings and errors go here
	// tls runs every port over TLS with node certificates of this CA;
	// the test clients (conn) trust it and present no certificate.
	tls            *testPKI
	auth           auth.Mode    // "" = none
	bootstrapToken string       // accepted as an admin token by every node
	logger         *slog.Logger // nil = inprocLogger()
	carryGrants    bool         // broker.Config.CarryGrants
	// logVersion is what every node advertises (0 = this build's newest),
	// so the cluster version stays there, as during a rolling upgrade.
	logVersion uint32
	// nodeConfig, if set, adjusts each node's cluster config (by node id)
	// before it starts.
	nodeConfig func(id string, c *cluster.Config)
}

// inprocNode is one in-process raftq node.
type inprocNode struct {
	id     string
	addr   string // gRPC address (what gossip advertises)
	b      *broker.Broker
	state  *fsm.FSM             // b.State()
	sched  *scheduler.Scheduler // b.Scheduler()
	node   *cluster.Node        // b.Node()
	srv    *Server
	peers  *peers.Pool // closed after b
	conn   *grpc.ClientConn
	broker raftqv1.BrokerClient
	admin  raftqv1.ClusterClient
	served chan error
}

type inprocCluster struct {
	t     *testing.T
	o     inprocOpts
	dir   string
	log   *slog.Logger
	nodes []*inprocNode
	base  int // goroutines before the cluster started
	down  bool
}

func inprocLogger() *slog.Logger {
	level := slog.LevelError + 4 // quiet: shutdown logs expected errors
	if os.Getenv("RAFTQ_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// logBuffer collects log lines from every node, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startInproc starts o.nodes nodes (the first is the gossip seed), waits for
// a ready leader known to every node (unless o.noWait) and registers a
// cleanup that stops everything and checks no goroutine is left behind.
func startInproc(t *testing.T, o inprocOpts) *inprocCluster {
	t.Helper()
	if o.expect == 0 {
		o.expect = o.nodes
	}
	if o.replicaCheck == 0 {
		o.replicaCheck = -1
	}
	c := &inprocCluster{t: t, base: runtime.NumGoroutine()}
	// TempDir before Cleanup: cleanups run last-registered first, and the
	// nodes must stop before TempDir's RemoveAll runs; the other way round a
	// live node creating a file (a wal segment, a snapshot) during RemoveAll
	// failed it with "directory not empty".
	dir := t.TempDir()
	t.Cleanup(c.stop)
	log := o.logger
	if o.logs != nil {
		log = slog.New(slog.NewTextHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if log == nil {
		log = inprocLogger()
	}
	c.o, c.dir, c.log = o, dir, log
	for i := range o.nodes {
		var join []string
		if i > 0 {
			join = []string{c.nodes[0].node.GossipAddr()}
		}
		c.nodes = append(c.nodes, c.startNode(fmt.Sprintf("n%d", i+1), join))
	}
	if !o.noWait {
		c.waitStable(20 * time.Second)
	}
	return c
}

// startNode starts one node on its data dir under c.dir, joining join.
// Its ports come from harness.FreePorts (never handed out twice on the
// machine while this process runs), so a restart binds them again.
func (c *inprocCluster) startNode(id string, join []string) *inprocNode {
	c.t.Helper()
	p, err := harness.FreePorts(3)
	if err != nil {
		c.t.Fatal(err)
	}
	at := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	return c.startNodeAt(id, join, nodeAddrs{grpc: at(p[0]), raft: at(p[1]), gossip: at(p[2])})
}

// nodeAddrs are the addresses a node binds.
type nodeAddrs struct{ grpc, raft, gossip string }

// startNodeAt is startNode on given addresses (a restart keeps its own).
func (c *inprocCluster) startNodeAt(id string, join []string, at nodeAddrs) *inprocNode {
	c.t.Helper()
	o, dir, log := c.o, c.dir, c.log
	lis, err := net.Listen("tcp", at.grpc)
	if err != nil {
		c.t.Fatal(err)
	}
	n := &inprocNode{id: id, addr: lis.Addr().String(), served: make(chan error, 1)}
	l := log.With("node", id)
	var nodeTLS *tlsconfig.Source
	if o.tls != nil {
		nodeTLS = o.tls.source(c.t, id)
	}
	cc := cluster.Config{
		NodeID:             id,
		DataDir:            filepath.Join(dir, id),
		RaftBind:           at.raft,
		GossipBind:         at.gossip,
		GRPCAdvertise:      n.addr,
		Version:            "build-of-" + id,
		Join:               join,
		BootstrapExpect:    o.expect,
		DeadNodeTimeout:    time.Minute,
		HeartbeatTimeout:   ipHeartbeat,
		ElectionTimeout:    ipHeartbeat,
		LeaderLeaseTimeout: ipLease,
		PromoteAfter:       ipPromoteAfter,
		TLS:                clusterTLS(nodeTLS),
		LogVersion:         o.logVersion,
	}
	if o.nodeConfig != nil {
		o.nodeConfig(id, &cc)
	}
	acfg := auth.Config{Mode: o.auth, BootstrapToken: o.bootstrapToken, Logger: l.With("component", "audit"), NodeTLS: nodeTLS != nil}
	n.peers = peers.New(nodeTLS, auth.NewForwarder(acfg).ClientUnary)
	cc.PeerProgress = n.peers.Progress
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	n.b, err = broker.New(ctx, broker.Config{
		Cluster:        cc,
		MaxQueuedBytes: o.maxQueuedBytes,
		Audit:          o.audit,
		CarryGrants:    o.carryGrants,
		Peers:          n.peers,
		Logger:         l,

		ReplicaCheckInterval: o.replicaCheck,
	})
	cancel()
	if err != nil {
		lis.Close()
		n.peers.Close()
		c.t.Fatalf("start %s: %v", id, err)
	}
	n.state, n.sched, n.node = n.b.State(), n.b.Scheduler(), n.b.Node()
	acfg.State = n.b.State().Auth
	authn := auth.New(acfg)
	n.srv = New(Config{Logger: l.With("component", "transport"), LeaderWait: o.leaderWait, TLS: nodeTLS, Auth: authn, Peers: n.peers}, n.b)
	go func() { n.served <- n.srv.Serve(lis) }()
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = o.tls.clientCreds(c.t, "")
	}
	n.conn, err = grpc.NewClient(n.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		c.t.Fatal(err)
	}
	n.broker, n.admin = raftqv1.NewBrokerClient(n.conn), raftqv1.NewClusterClient(n.conn)
	return n
}

// restart stops n without leaving (as a process that ends) and starts a
// node with its id on its data dir and its addresses, joining through the
// other nodes, as raftq serve starting again does; the new node takes n's
// place in c.nodes.
func (c *inprocCluster) restart(n *inprocNode) *inprocNode {
	c.t.Helper()
	at := nodeAddrs{grpc: n.addr, raft: n.node.RaftAddr(), gossip: n.node.GossipAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.conn.Close()
	n.srv.Stop(ctx)
	if err := <-n.served; err != nil {
		c.t.Errorf("%s: Serve: %v", n.id, err)
	}
	if err := n.b.Close(ctx); err != nil {
		c.t.Errorf("%s: shutdown: %v", n.id, err)
	}
	n.peers.Close()
	var join []string
	for _, o := range c.nodes {
		if o != n {
			join = append(join, o.node.GossipAddr())
		}
	}
	m := c.startNodeAt(n.id, join, at)
	for i := range c.nodes {
		if c.nodes[i] == n {
			c.nodes[i] = m
		}
	}
	return m
}

// waitClusterVersion waits until every node applies at least version v.
func waitClusterVersion(t *testing.T, c *inprocCluster, v uint32) {
	t.Helper()
	waitUntil(t, 20*time.Second, "the cluster version", func() error {
		for _, n := range c.nodes {
			if got := n.state.ClusterVersion(); got < v {
				return fmt.Errorf("%s at cluster version %d, want %d", n.id, got, v)
			}
		}
		return nil
	})
}

// waitStable waits until one node leads (its Barrier done), every node
// knows it with its gRPC address, and the leader's configuration holds
// every node as a voter.
func (c *inprocCluster) waitStable(timeout time.Duration) *inprocNode {
	c.t.Helper()
	var l *inprocNode
	waitUntil(c.t, timeout, "a stable leader known to every node", func() error {
		l = nil
		for _, n := range c.nodes {
			if n.node.LeaderReady() {
				l = n
			}
		}
		if l == nil {
			return errors.New("no ready leader")
		}
		for _, n := range c.nodes {
			if li := n.node.Leader(); li.ID != l.id || li.GRPCAddr != l.addr {
				return fmt.Errorf("%s sees leader %+v, want %s at %s", n.id, li, l.id, l.addr)
			}
		}
		voters := 0
		for _, ns := range l.node.Status().Nodes {
			if ns.Suffrage == "voter" {
				voters++
			}
		}
		if voters != len(c.nodes) {
			return fmt.Errorf("%d voters", voters)
		}
		return nil
	})
	return l
}

// leader returns the node that leads, waiting (bounded) through an
// election in progress.
func (c *inprocCluster) leader() *inprocNode {
	c.t.Helper()
	var l *inprocNode
	waitUntil(c.t, 10*time.Second, "a leader", func() error {
		for _, n := range c.nodes {
			if n.node.IsLeader() {
				l = n
				return nil
			}
		}
		return errors.New("no node leads")
	})
	return l
}

// followers returns the nodes other than the leader.
func (c *inprocCluster) followers() []*inprocNode {
	l := c.leader()
	var out []*inprocNode
	for _, n := range c.nodes {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

func (c *inprocCluster) byID(id string) *inprocNode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// synced waits until every node has applied what the leader has applied.
func (c *inprocCluster) synced() {
	c.t.Helper()
	idx := c.leader().state.AppliedIndex()
	waitUntil(c.t, 10*time.Second, "replicas to catch up", func() error {
		for _, n := range c.nodes {
			if got := n.state.AppliedIndex(); got < idx {
				return fmt.Errorf("%s applied %d of %d", n.id, got, idx)
			}
		}
		return nil
	})
}

// digests returns every node's state digest once the replicas caught up;
// it fails the test if they differ.
func (c *inprocCluster) digests() string {
	c.t.Helper()
	c.synced()
	first := ""
	for _, n := range c.nodes {
		d := stateDigest(c.t, n.state)
		if first == "" {
			first = d
		} else if d != first {
			c.t.Fatalf("replica %s digest %s differs from %s's %s", n.id, d, c.nodes[0].id, first)
		}
	}
	return first
}

// stop closes clients, stops the servers, shuts the nodes down (followers
// first, so each graceful leave keeps a quorum) and checks for goroutine
// leaks.
func (c *inprocCluster) stop() {
	if c.down {
		return
	}
	c.down = true
	t := c.t
	// The nodes still run on their data dirs: if these are gone, a cleanup
	// removed them under live nodes (see startInproc).
	if _, err := os.Stat(c.dir); err != nil {
		t.Errorf("data dir removed before the nodes stopped: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		n.conn.Close()
	}
	for _, n := range c.nodes {
		n.srv.Stop(ctx)
		if err := <-n.served; err != nil {
			t.Errorf("%s: Serve: %v", n.id, err)
		}
	}
	var order []*inprocNode
	for _, n := range c.nodes {
		if !n.node.IsLeader() {
			order = append(order, n)
		}
	}
	for _, n := range c.nodes {
		if n.node.IsLeader() {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.b.Close(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", n.id, err)
		}
		n.peers.Close()
	}
	harness.CheckNoLeaks(t, c.base)
}

// waitUntil polls cond until it returns nil, failing the test with its last
// error when timeout passes (harness.WaitFor, the one wait of every test).
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := harness.WaitFor(context.Background(), timeout, 10*time.Millisecond, func(context.Context) error { return cond() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// memSink collects a snapshot in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// stateDigest hashes the FSM's state — queues, configs, counters, messages
// with their leases, dedup entries — leaving out the snapshot header
// (applied index and clock), which every applied command moves even when it
// changes nothing.
func stateDigest(t *testing.T, f *fsm.FSM) string {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	b := sink.Bytes()
	hlen, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < hlen {
		t.Fatalf("snapshot header unreadable (%d bytes)", len(b))
	}
	sum := sha256.Sum256(b[n+int(hlen):])
	return hex.EncodeToString(sum[:])
}

// errorInfo returns the google.rpc.ErrorInfo detail of err, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// checkRedirect fails unless err is Unavailable with ErrorInfo reason (and,
// for NOT_LEADER, the leader's id and gRPC address).
func checkRedirect(t *testing.T, err error, reason string, leader *inprocNode) {
	t.Helper()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable %s", err, reason)
	}
	ei := errorInfo(err)
	if ei == nil || ei.Reason != reason {
		t.Fatalf("got %v with ErrorInfo %v, want reason %s", err, ei, reason)
	}
	if leader != nil && (ei.Metadata["leader_id"] != leader.id || ei.Metadata["leader_addr"] != leader.addr) {
		t.Fatalf("redirect metadata %v, want leader_id %s leader_addr %s", ei.Metadata, leader.id, leader.addr)
	}
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// leaseErr opens a Lease stream and returns the error its first Recv gets
// (nil if a delivery arrives instead).
func leaseErr(ctx context.Context, b raftqv1.BrokerClient, req *raftqv1.LeaseRequest) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := b.Lease(ctx, req)
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// recvN reads deliveries from s until it has n.
func recvN(t *testing.T, s raftqv1.Broker_LeaseClient, n int) []*raftqv1.Delivery {
	t.Helper()
	var out []*raftqv1.Delivery
	for len(out) < n {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d of %d deliveries: %v", len(out), n, err)
		}
		if len(r.Messages) == 0 {
			t.Fatal("empty LeaseResponse")
		}
		out = append(out, r.Messages...)
	}
	if len(out) > n {
		t.Fatalf("got %d deliveries, want %d", len(out), n)
	}
	return out
}

func refOf(d *raftqv1.Delivery) *raftqv1.LeaseRef {
	return &raftqv1.LeaseRef{MessageId: d.Id, LeaseToken: d.LeaseToken}
}

func refsOf(ds []*raftqv1.Delivery) []*raftqv1.LeaseRef {
	out := make([]*raftqv1.LeaseRef, len(ds))
	for i, d := range ds {
		out[i] = refOf(d)
	}
	return out
}
