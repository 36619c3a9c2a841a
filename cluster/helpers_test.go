package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
)

// Test timing: short, but with slack for a 2-core machine under -race.
const (
	testHeartbeat   = 500 * time.Millisecond
	testLease       = 250 * time.Millisecond
	testDeadTimeout = 2 * time.Second
)

// testFSM appends every command to a list.
type testFSM struct {
	mu      sync.Mutex
	entries []string
	// restores counts the restores that succeeded.
	restores atomic.Int64
}

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return len(f.entries)
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &testSnapshot{entries: slices.Clone(f.entries)}, nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	f.entries = entries
	f.mu.Unlock()
	f.restores.Add(1)
	return nil
}

// RestoreCounting is Restore reading rc to its end, as the node's
// start-up restore expects (countingRestorer); it counts entries as
// messages.
func (f *testFSM) RestoreCounting(rc io.ReadCloser, messages *atomic.Int64) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var entries []string
	if err := json.Unmarshal(b, &entries); err != nil {
		return err
	}
	messages.Add(int64(len(entries)))
	f.mu.Lock()
	f.entries = entries
	f.mu.Unlock()
	f.restores.Add(1)
	return nil
}

func (f *testFSM) Entries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type testSnapshot struct{ entries []string }

func (s *testSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.entries); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *testSnapshot) Release() {}

// testLeader counts leader terms.
type testLeader struct {
	starts  atomic.Int32
	stops   atomic.Int32
	running atomic.Int32
}

func (l *testLeader) RunLeader(ctx context.Context) {
	l.starts.Add(1)
	l.running.Add(1)
	<-ctx.Done()
	l.running.Add(-1)
	l.stops.Add(1)
}

// freePort returns a loopback port free for both TCP and UDP (memberlist
// needs both), never handed out twice on this machine while this process
// lives (harness.FreePorts: below the ephemeral range, reserved across
// test binaries). A copy here that only probed a random port let two
// nodes, or two test binaries, pick the same one before either bound it.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("RAFTQ_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func fastGossip(mc *memberlist.Config) {
	mc.ProbeInterval = 250 * time.Millisecond
	mc.ProbeTimeout = 200 * time.Millisecond
	mc.SuspicionMult = 2
	mc.IndirectChecks = 1
	mc.GossipInterval = 50 * time.Millisecond
	mc.PushPullInterval = 2 * time.Second
	mc.TCPTimeout = 2 * time.Second
	mc.GossipToTheDeadTime = 5 * time.Second
}

// nodeConfig is a node's Config and what its host builds its Raft port
// from (host.New builds the port and hands it to New).
type nodeConfig struct {
	Config
	// RaftBind and RaftAdvertise are the Raft port's bind address and
	// the address others dial (raftmux.Listen).
	RaftBind, RaftAdvertise string
	// TLS nil: plain TCP.
	TLS *raftmux.TLS
	// wrapRaftListener wraps the Raft port's listener (a test refuses
	// preambles in it, as an old build's raft does).
	wrapRaftListener func(net.Listener) net.Listener
}

// testConfig returns a node config on fresh loopback ports.
func testConfig(t *testing.T, id, dir string, expect int) nodeConfig {
	t.Helper()
	return nodeConfig{RaftBind: fmt.Sprintf("127.0.0.1:%d", freePort(t)), Config: Config{
		NodeID:             id,
		DataDir:            filepath.Join(dir, id),
		GossipBind:         fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		GRPCAdvertise:      fmt.Sprintf("127.0.0.1:%d", freePort(t)), // not served here
		HTTPAdvertise:      fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		BootstrapExpect:    expect,
		DeadNodeTimeout:    testDeadTimeout,
		Logger:             testLogger(),
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testHeartbeat,
		LeaderLeaseTimeout: testLease,
		PromoteAfter:       300 * time.Millisecond,
		reconcileInterval:  500 * time.Millisecond,
		joinRetry:          200 * time.Millisecond,
		tuneGossip:         fastGossip,
	}}
}

type testNode struct {
	*Node
	// Group is the node's data group (the Raft runtime), for the tests'
	// Apply, leadership and snapshots.
	*raftgroup.Group
	cfg nodeConfig
	fsm *testFSM
	svc *testLeader
	// mux is the node's Raft port, closed after the node stops (as the
	// host does).
	mux *raftmux.Mux
}

func startNode(t *testing.T, cfg nodeConfig) *testNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.PeerProgress == nil {
		cfg.PeerProgress = dialProgress
	}
	tn, err := openNode(ctx, cfg, &testFSM{}, &testLeader{})
	if err != nil {
		t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	serveProgress(t, tn)
	return tn
}

// openNode builds the node's Raft port as the host does and starts the
// node on it; fsm's type is the test's (tn.fsm is set only for a
// *testFSM).
func openNode(ctx context.Context, cfg nodeConfig, fsm raft.FSM, svc *testLeader) (*testNode, error) {
	ln, adv, err := raftmux.Listen(ctx, cfg.RaftBind, cfg.RaftAdvertise)
	if err != nil {
		return nil, err
	}
	if cfg.wrapRaftListener != nil {
		ln = cfg.wrapRaftListener(ln)
	}
	mux, err := raftmux.New(ln, adv, raftmux.Config{TLS: cfg.TLS, Log: cfg.Logger, Legacy: dataGroup})
	if err != nil {
		return nil, err
	}
	tn := &testNode{cfg: cfg, svc: svc, mux: mux}
	tn.fsm, _ = fsm.(*testFSM)
	var leader LeaderService
	if svc != nil {
		leader = svc
	}
	n, err := New(ctx, cfg.Config, mux, fsm, leader)
	if err != nil {
		mux.Close()
		return nil, err
	}
	tn.Node, tn.Group = n, n.Group()
	return tn, nil
}

// leaderInfo names the current leader as a node knows it.
type leaderInfo struct{ ID, RaftAddr, GRPCAddr, ClientGRPCAddr string }

func info(l raftgroup.Leadership) leaderInfo {
	return leaderInfo{ID: l.LeaderID, RaftAddr: l.LeaderRaftAddr, GRPCAddr: l.LeaderGRPCAddr, ClientGRPCAddr: l.LeaderClientAddr}
}

// Leader returns the current leader as n knows it; ID is empty if no
// leader is known.
func (n *testNode) Leader() leaderInfo { return info(n.Leadership()) }

// WaitLeader waits until a leader is known together with its gossip
// metadata (so GRPCAddr is what it advertises), or ctx ends or the node
// stops.
func (n *testNode) WaitLeader(ctx context.Context) (leaderInfo, error) {
	l, err := n.WaitLeadership(ctx, raftgroup.Leadership.LeaderKnown)
	if err != nil {
		return leaderInfo{}, err
	}
	return info(l), nil
}

// Shutdown stops the node, then its Raft port.
func (n *testNode) Shutdown(ctx context.Context) error {
	err := n.Node.Shutdown(ctx)
	n.mux.Close()
	return err
}

// stop is Node.stop, then the Raft port closes.
func (n *testNode) stop(ctx context.Context, graceful bool) error {
	err := n.Node.stop(ctx, graceful)
	n.mux.Close()
	return err
}

// serveProgress answers, at the node's advertised gRPC address (no gRPC
// server listens there in these tests), with its applied index: what the
// serving layer's Status call tells a leader, over a real connection. It
// stops when the node does.
func serveProgress(t *testing.T, n *testNode) {
	t.Helper()
	ln, err := net.Listen("tcp", n.cfg.GRPCAdvertise)
	if err != nil {
		t.Fatalf("progress listener for %s: %v", n.ID(), err)
	}
	go func() {
		<-n.ctx.Done()
		ln.Close()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%d\n", n.AppliedIndex())
			c.Close()
		}
	}()
}

// dialProgress is the PeerProgress of these tests: it reads what
// serveProgress answers.
func dialProgress(ctx context.Context, id, addr string) (uint64, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var applied uint64
	if _, err := fmt.Fscan(c, &applied); err != nil {
		return 0, fmt.Errorf("progress of %s: %w", id, err)
	}
	return applied, nil
}

func shutdown(t *testing.T, n *testNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("shutdown %s: %v", n.ID(), err)
	}
}

// crash stops n without a leadership transfer or gossip leave.
func crash(t *testing.T, n *testNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.stop(ctx, false); err != nil {
		t.Errorf("crash %s: %v", n.ID(), err)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// suffrage returns id's suffrage in n's latest configuration ("" if absent).
func suffrage(n *testNode, id string) string {
	servers, _ := raftgroup.LatestServers(n.Raft())
	for _, s := range servers {
		if string(s.ID) == id {
			return s.Suffrage.String()
		}
	}
	return ""
}

// voters returns the ids of the voters in n's Raft configuration, sorted.
func voters(n *testNode) []string {
	servers, err := raftgroup.LatestServers(n.Raft())
	if err != nil {
		return nil
	}
	var ids []string
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	return ids
}
