package raftgroup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
)

// Test timing: short, but with slack for a 2-core machine under -race.
const (
	testHeartbeat = 500 * time.Millisecond
	testLease     = 250 * time.Millisecond
)

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("RAFTQ_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// testFSM appends every command to a list (cluster's tests have the same).
type testFSM struct {
	mu      sync.Mutex
	entries []string
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

// testConfig returns a lone group's config in dir/id on a fresh
// loopback port (the Port is made by startNode); expect must be 1: a
// group alone has no membership to found a larger one (cluster's tests
// run those).
func testConfig(t *testing.T, id, dir string, expect int) nodeConfig {
	t.Helper()
	if expect != 1 {
		t.Fatalf("a lone group's test with bootstrap-expect %d", expect)
	}
	p, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return nodeConfig{RaftBind: fmt.Sprintf("127.0.0.1:%d", p[0]), Config: Config{
		Group:              "data",
		NodeID:             id,
		Dir:                filepath.Join(dir, id),
		Logger:             testLogger(),
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testHeartbeat,
		LeaderLeaseTimeout: testLease,
	}}
}

// nodeConfig is a group's Config and its Raft port's bind address (kept
// across restarts: it is in the group's configuration).
type nodeConfig struct {
	Config
	RaftBind string
}

// testNode is a lone group on a Raft port of its own, as one node with
// bootstrap-expect 1 runs its data group.
type testNode struct {
	*Group
	cfg nodeConfig
	fsm *testFSM
}

// startNode opens cfg's group (the same port as its last start), founds
// it if it has no state, and starts it.
func startNode(t *testing.T, cfg nodeConfig) *testNode {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	ln, adv, err := raftmux.Listen(ctx, cfg.RaftBind, "")
	if err != nil {
		t.Fatal(err)
	}
	mux, err := raftmux.New(ln, adv, raftmux.Config{Log: cfg.Logger, Legacy: cfg.Group})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Port = mux
	n := &testNode{cfg: cfg, fsm: &testFSM{}}
	if n.Group, err = Open(cfg.Config, n.fsm); err != nil {
		mux.Close()
		t.Fatalf("open %s: %v", cfg.NodeID, err)
	}
	if !n.HasState() {
		conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(adv.String())}}}
		if err := n.Bootstrap(conf); err != nil {
			t.Fatalf("bootstrap %s: %v", cfg.NodeID, err)
		}
	}
	n.Start()
	return n
}

// shutdown closes the group, then its port.
func shutdown(t *testing.T, n *testNode) {
	t.Helper()
	if err := n.Close(); err != nil {
		t.Errorf("close %s: %v", n.cfg.NodeID, err)
	}
	n.cfg.Port.Close()
}

// crash stops n as kill -9 would as far as the group can tell: a group
// hands nothing over when it closes.
func crash(t *testing.T, n *testNode) { shutdown(t, n) }

// WaitLeader waits until a leader is known (a lone group's is itself).
func (n *testNode) WaitLeader(ctx context.Context) (Leadership, error) {
	return n.WaitLeadership(ctx, Leadership.LeaderKnown)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
