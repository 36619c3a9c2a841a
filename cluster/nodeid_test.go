package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/test/harness"
)

// TestDataDirKeepsItsNodeID: the first start records the id in the data
// dir; a restart under the same id works, one under another id is refused
// with an error naming both ids, and the record is left as it was.
func TestDataDirKeepsItsNodeID(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "a", dir, 1)
	if got, err := PersistedNodeID(cfg.DataDir); err != nil || got != "" {
		t.Fatalf("before the first start: %q, %v; want none", got, err)
	}
	n := startNode(t, cfg)
	shutdown(t, n)
	if got, err := PersistedNodeID(cfg.DataDir); err != nil || got != "a" {
		t.Fatalf("after the first start: %q, %v; want a", got, err)
	}

	other := cfg
	other.NodeID = "b"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := openNode(ctx, other, &testFSM{}, nil)
	if !errors.Is(err, ErrNodeIDMismatch) || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("start as b on a's data dir: %v; want ErrNodeIDMismatch naming a and b", err)
	}
	if got, _ := PersistedNodeID(cfg.DataDir); got != "a" {
		t.Fatalf("the refused start changed the record to %q", got)
	}

	n = startNode(t, cfg) // the same id starts again
	shutdown(t, n)
}

func TestPersistedNodeIDRefusesAnEmptyRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, nodeIDFile), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PersistedNodeID(dir); err == nil {
		t.Fatal("an empty node-id file was accepted")
	}
}

// TestRaftAdvertisedByName: a Raft address advertised by host name stays
// the name in the configuration (each dial resolves it, so a peer whose IP
// changes is still found), and such nodes form a cluster.
func TestRaftAdvertisedByName(t *testing.T) {
	dir := t.TempDir()
	var nodes []*testNode
	var seeds []string
	for _, id := range []string{"a", "b"} {
		cfg := testConfig(t, id, dir, 2)
		_, port, _ := strings.Cut(cfg.RaftBind, ":")
		cfg.RaftAdvertise = "localhost:" + port
		cfg.Join = seeds
		n := startNode(t, cfg)
		defer shutdown(t, n)
		if n.RaftAddr() != cfg.RaftAdvertise {
			t.Fatalf("%s advertises %q, want the name %q", id, n.RaftAddr(), cfg.RaftAdvertise)
		}
		seeds = append(seeds, n.GossipAddr())
		nodes = append(nodes, n)
	}
	harness.Eventually(t, 20*time.Second, harness.Holds("two voters by name", func() bool {
		for _, n := range nodes {
			servers, err := raftgroup.LatestServers(n.Raft())
			if err != nil || len(servers) != 2 {
				return false
			}
			for _, s := range servers {
				if !strings.HasPrefix(string(s.Address), "localhost:") {
					return false
				}
			}
		}
		return true
	}))
	li, err := nodes[0].WaitLeader(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(li.RaftAddr, "localhost:") {
		t.Fatalf("leader's raft address %q, want it by name", li.RaftAddr)
	}
	for _, n := range nodes {
		if n.ID() == li.ID {
			if _, err := n.Apply(ctxTimeout(t, 10*time.Second), []byte("by-name")); err != nil {
				t.Fatalf("apply on the leader: %v", err)
			}
		}
	}
}
