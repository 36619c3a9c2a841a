package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/tlsconfig/pki"
)

// TestRotationUnderLoad: on a running three-node cluster taking writes,
// the gossip key is rotated in three steps (add, switch, drop) and the
// certificates and their CA are replaced (trust both CAs, reissue, drop the
// old CA), each node reloading without a restart. No write fails beyond
// one retry; afterwards a node with only the new key and a certificate of
// the new CA joins and gets the log, a node with only the old gossip key
// cannot join, and the old CA's certificates no longer speak Raft.
func TestRotationUnderLoad(t *testing.T) {
	base := runtime.NumGoroutine()
	ca := newTestCA(t)
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if os.Getenv("RAFTQ_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(io.MultiWriter(logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	t.Cleanup(func() {
		if t.Failed() {
			s := logs.String()
			t.Logf("---- node logs (last 64 KiB) ----\n%s", s[max(0, len(s)-64<<10):])
		}
	})
	key := func() []byte {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	k1, k2 := key(), key()
	oldNode, _ := ca.pair(t, pki.Request{Name: "n9", Node: true})

	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	config := func(id string, keys [][]byte) (nodeConfig, *tlsconfig.Source) {
		cfg := testConfig(t, id, c.dir, 3)
		cfg.Logger = log.With("node", id)
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		cfg.DeadNodeTimeout = 5 * time.Minute
		cfg.GossipKeys = keys
		var src *tlsconfig.Source
		cfg.TLS, src = ca.nodeSource(t, id, cfg.Logger)
		return cfg, src
	}
	srcs := map[string]*tlsconfig.Source{}
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg, src := config(id, [][]byte{k1})
		srcs[id] = src
		c.seeds = append(c.seeds, cfg.GossipBind)
		c.start(cfg)
	}
	defer func() {
		c.shutdownAll()
		harness.CheckNoLeaksWithin(t, base, 10*time.Second)
	}()
	c.waitVoters(30*time.Second, "n1", "n2", "n3")

	// The load: one write at a time, each retried once at the current
	// leader if the first attempt fails.
	var (
		written, failed atomic.Int64
		firstErr        atomic.Pointer[error] // a Value would panic on a second concrete error type
		stop            = make(chan struct{})
		wg              sync.WaitGroup
	)
	leaderNow := func() *testNode {
		for _, n := range c.alive() {
			if n.IsLeader() {
				return n
			}
		}
		return nil
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			var err error
			for attempt := range 2 {
				l := leaderNow()
				if l == nil && attempt == 1 {
					// The retry waits (bounded) for an election to end.
					_ = harness.WaitFor(ctxTimeout(t, 10*time.Second), 0, 20*time.Millisecond, func(context.Context) error {
						if l = leaderNow(); l == nil {
							return errors.New("no leader")
						}
						return nil
					})
				}
				if l == nil {
					err = errors.New("no leader")
					continue
				}
				ctx := ctxTimeout(t, 10*time.Second)
				if _, err = l.Apply(ctx, fmt.Appendf(nil, "w%d", i)); err == nil {
					break
				}
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
				continue
			}
			written.Add(1)
		}
	})
	waitWrites := func(what string) {
		t.Helper()
		from := written.Load()
		harness.Eventually(t, 20*time.Second, harness.Holds("writes after "+what, func() bool { return written.Load() >= from+20 }))
	}
	waitWrites("start")

	// Gossip key rotation: add the new key second, make it first, drop the old.
	for i, keys := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		for _, id := range []string{"n1", "n2", "n3"} {
			if err := c.nodes[id].SetGossipKeys(keys); err != nil {
				t.Fatal(err)
			}
		}
		waitWrites(fmt.Sprintf("gossip step %d", i+1))
	}

	// Certificate rotation to a new CA.
	newCA, err := pki.NewCA("new CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(ca.dir, pki.CAFile)
	reloadAll := func(what string) {
		t.Helper()
		for id, s := range srcs {
			if err := s.Reload(); err != nil {
				t.Fatalf("%s: reload %s: %v", what, id, err)
			}
		}
		waitWrites(what)
	}
	if err := os.WriteFile(caFile, append(append([]byte{}, ca.ca.CertPEM...), newCA.CertPEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	reloadAll("trusting both CAs")
	ca.ca = newCA // issue from the new CA from now on
	for _, id := range []string{"n1", "n2", "n3"} {
		ca.pair(t, pki.Request{Name: id, Node: true})
	}
	reloadAll("new certificates")
	if err := os.WriteFile(caFile, newCA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	reloadAll("dropping the old CA")

	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d writes failed after a retry; first: %v", n, written.Load()+n, *firstErr.Load())
	}

	// A node with the old gossip key only cannot join; one with the new
	// key and a certificate of the new CA becomes a voter and gets the log.
	stale, _ := config("n5", [][]byte{k1})
	n5 := c.start(stale)
	fresh, _ := config("n4", [][]byte{k2})
	n4 := c.start(fresh)
	c.waitVoters(30*time.Second, "n1", "n2", "n3", "n4")
	l := leaderNow()
	harness.Eventually(t, 20*time.Second, harness.Holds("the log on n4", func() bool {
		return len(n4.fsm.Entries()) >= len(l.fsm.Entries())
	}))
	if _, ok := l.ms.Records()["n5"]; ok {
		t.Fatal("a node with only the old gossip key joined the gossip")
	}
	if len(n5.fsm.Entries()) != 0 || slices.Contains(voters(l), "n5") {
		t.Fatal("n5 got in")
	}
	if !strings.Contains(n5.ms.List()[0].ID, "n5") || len(n5.ms.List()) != 1 {
		t.Fatalf("n5 sees members %v", n5.ms.List())
	}
	crash(t, n5)
	delete(c.nodes, "n5")

	// The old CA's certificates are refused now.
	if err := speakRaft(l.RaftAddr(), []tls.Certificate{oldNode}); err == nil {
		t.Fatal("a certificate of the dropped CA spoke Raft")
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("the refusal logged", func() bool { return strings.Contains(logs.String(), "wrong CA") }))
}
