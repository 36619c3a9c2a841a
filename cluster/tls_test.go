package cluster

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/raftq/raftq/internal/hostport"
	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/tlsconfig/pki"
)

// testCA issues node certificates into a temp dir and builds the TLS
// config of a node from them, as raftq serve does.
type testCA struct {
	dir string
	ca  *pki.CA
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCA{dir: t.TempDir(), ca: ca}
	if err := ca.WriteCA(c.dir, false); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *testCA) pair(t *testing.T, req pki.Request) (tls.Certificate, tlsconfig.Files) {
	t.Helper()
	cp, kp, err := c.ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(c.dir, pki.CertFile(req.Name), pki.KeyFile(req.Name), cp, kp, true); err != nil {
		t.Fatal(err)
	}
	f := tlsconfig.Files{Cert: filepath.Join(c.dir, pki.CertFile(req.Name)), Key: filepath.Join(c.dir, pki.KeyFile(req.Name)), CA: filepath.Join(c.dir, pki.CAFile)}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, f
}

// nodeTLS is node id's Raft TLS, logging to log.
func (c *testCA) nodeTLS(t *testing.T, id string, log *slog.Logger) *raftmux.TLS {
	t.Helper()
	cfg, _ := c.nodeSource(t, id, log)
	return cfg
}

// nodeSource is nodeTLS and the material behind it (to reload).
func (c *testCA) nodeSource(t *testing.T, id string, log *slog.Logger) (*raftmux.TLS, *tlsconfig.Source) {
	t.Helper()
	_, f := c.pair(t, pki.Request{Name: id, Node: true})
	src, err := tlsconfig.Load(f, log)
	if err != nil {
		t.Fatal(err)
	}
	return &raftmux.TLS{Server: src.NodeServerConfig("raft"), Dial: src.NodeClientConfig, PeerName: tlsconfig.PeerNodeName}, src
}

// logBuffer keeps every line logged (and passes warnings on to stderr).
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

// TestTLSCluster: Raft over mutual TLS. Nodes of the CA form a cluster and
// replicate; a client certificate, another CA's node certificate or an
// expired one cannot speak Raft; a foreign node on the gossip port is
// never made a voter and never receives the log; a forged gossip leave
// does not remove a node, while a node's own leave over mTLS does, at once.
func TestTLSCluster(t *testing.T) {
	base := runtime.NumGoroutine()
	ca := newTestCA(t)
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	if os.Getenv("RAFTQ_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(io.MultiWriter(logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	t.Cleanup(func() {
		if t.Failed() {
			s := logs.String()
			t.Logf("---- node logs (last 64 KiB) ----\n%s", s[max(0, len(s)-64<<10):])
		}
	})
	c := &testCluster{t: t, dir: t.TempDir(), expect: 3, nodes: map[string]*testNode{}}
	cfgs := map[string]nodeConfig{}
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		cfg := testConfig(t, id, c.dir, 3)
		cfg.Logger = log.With("node", id)
		cfg.TLS = ca.nodeTLS(t, id, cfg.Logger)
		// Long enough that only a leave, never a failure, removes a node
		// within the test.
		cfg.DeadNodeTimeout = 5 * time.Minute
		// Production timing: TLS handshakes on a loaded 2-core machine
		// made 500 ms heartbeats flap.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		cfgs[id] = cfg
		if id != "n4" {
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

	step("form four voters and replicate over mTLS", func(t *testing.T) {
		for _, id := range []string{"n1", "n2", "n3", "n4"} {
			c.start(cfgs[id])
		}
		c.waitVoters(30*time.Second, "n1", "n2", "n3", "n4")
		applyRetry(t, c, "x1")
		for _, n := range c.alive() {
			harness.Eventually(t, 10*time.Second, harness.Holds("x1 on "+n.ID(), func() bool { return slices.Contains(n.fsm.Entries(), "x1") }))
		}
	})

	step("only node certificates of the CA speak Raft", func(t *testing.T) {
		other := newTestCA(t)
		client, _ := ca.pair(t, pki.Request{Name: "alice"})
		foreign, _ := other.pair(t, pki.Request{Name: "n9", Node: true})
		old, _ := ca.pair(t, pki.Request{Name: "n8", Node: true, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		target := c.leader()
		for _, tc := range []struct {
			name string
			cert []tls.Certificate
			want string // in the target's log
		}{
			{"client certificate of the same CA", []tls.Certificate{client}, "not a node certificate"},
			{"node certificate of another CA", []tls.Certificate{foreign}, "wrong CA"},
			{"expired node certificate", []tls.Certificate{old}, "expired at"},
			{"no certificate", nil, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := speakRaft(target.RaftAddr(), tc.cert); err == nil {
					t.Fatal("the Raft port answered a Raft RPC")
				}
				if tc.want != "" {
					harness.Eventually(t, 5*time.Second, harness.Holds("the refusal logged", func() bool {
						return strings.Contains(logs.String(), tc.want)
					}))
				}
			})
		}
		// A plaintext peer gets nothing either.
		if err := speakRaft(target.RaftAddr(), nil, true); err == nil {
			t.Fatal("the Raft port answered plaintext")
		}
	})

	step("a foreign node on the gossip port is never a voter", func(t *testing.T) {
		other := newTestCA(t)
		foreign := testConfig(t, "n5", c.dir, 3)
		foreign.Logger = slog.New(slog.DiscardHandler)
		foreign.TLS = other.nodeTLS(t, "n5", foreign.Logger)
		plain := testConfig(t, "n6", c.dir, 3)
		plain.Logger = slog.New(slog.DiscardHandler)
		f1, f2 := c.start(foreign), c.start(plain)
		harness.Eventually(t, 20*time.Second, harness.Holds("the leader to refuse both", func() bool {
			s := logs.String()
			return strings.Contains(s, "not adding gossip member as a voter") &&
				strings.Contains(s, "id=n5") && strings.Contains(s, "id=n6")
		}))
		// c.leader would wait for the foreign nodes to know the leader.
		var l *testNode
		harness.Eventually(t, 10*time.Second, harness.Holds("a leader", func() bool {
			for _, id := range []string{"n1", "n2", "n3", "n4"} {
				if c.nodes[id].IsLeader() {
					l = c.nodes[id]
					return true
				}
			}
			return false
		}))
		if got := voters(l); !slices.Equal(got, []string{"n1", "n2", "n3", "n4"}) {
			t.Fatalf("voters %v", got)
		}
		for _, f := range []*testNode{f1, f2} {
			if e := f.fsm.Entries(); len(e) != 0 {
				t.Fatalf("%s received the log: %v", f.ID(), e)
			}
			if f.IsLeader() {
				t.Fatalf("%s leads", f.ID())
			}
		}
		crash(t, f1)
		crash(t, f2)
		delete(c.nodes, "n5")
		delete(c.nodes, "n6")
	})

	step("a node's own leave over mTLS removes it at once", func(t *testing.T) {
		n4 := c.nodes["n4"]
		if n4.IsLeader() {
			if _, err := n4.TransferLeadership(ctxTimeout(t, 10*time.Second), ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := n4.Leave(ctxTimeout(t, 20*time.Second), false); err != nil {
			t.Fatal(err)
		}
		shutdown(t, n4)
		delete(c.nodes, "n4")
		c.waitVoters(20*time.Second, "n1", "n2", "n3")
		if !strings.Contains(logs.String(), "node announced its leave over mutual TLS") {
			t.Fatal("removed without the authenticated leave")
		}
	})

	step("a forged gossip leave does not remove a node", func(t *testing.T) {
		victim := c.follower()
		forgeLeave(t, c.seeds, victim.ID())
		crash(t, victim)
		l := c.leader()
		harness.Eventually(t, 20*time.Second, harness.Holds("the leader to see the victim gone", func() bool {
			m, ok := l.ms.Records()[victim.ID()]
			return ok && m.State != membership.Alive
		}))
		if st := l.ms.Records()[victim.ID()].State; st != membership.Failed {
			t.Fatalf("victim is %v, want failed: the forged leave counted", st)
		}
		// One full pass now. Its error may name the crashed foreign
		// nodes (gossip may not have noticed yet); the pass goes on past
		// them.
		if _, err := l.rec.reconcile(ctxTimeout(t, 10*time.Second), &reconcileState{missing: map[string]time.Time{}, floorLogged: map[string]bool{}, refused: map[string]string{}}); err != nil {
			t.Logf("reconcile: %v", err)
		}
		if got := voters(l); !slices.Contains(got, victim.ID()) {
			t.Fatalf("voters %v: the forged leave removed %s", got, victim.ID())
		}
	})
}

// speakRaft dials a Raft port with TLS (or plaintext) presenting certs,
// sends the start of a Raft RPC and waits for any answer: an error means
// the port would not speak Raft to this peer.
func speakRaft(addr string, certs []tls.Certificate, plaintext ...bool) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	var c net.Conn
	var err error
	if len(plaintext) > 0 && plaintext[0] {
		c, err = d.Dial("tcp", addr)
	} else {
		c, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{Certificates: certs, InsecureSkipVerify: true})
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	// A RequestVote type byte and a truncated body: a server that took it
	// as Raft would wait for the rest; one that refused the peer hangs up.
	if _, err := c.Write([]byte{1, 0x80}); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 1))
	if err == nil {
		return fmt.Errorf("answered")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil // it waited for more Raft: it accepted the peer
	}
	return err
}

// forgeLeave joins the gossip ring as a bare memberlist (no raftq node, no
// certificate) and sends every member a leave notice in victim's name.
func forgeLeave(t *testing.T, seeds []string, victim string) {
	t.Helper()
	mc := memberlist.DefaultLocalConfig()
	mc.Name = "mallory"
	mc.BindAddr, mc.BindPort = "127.0.0.1", freePort(t)
	mc.LogOutput = io.Discard
	fastGossip(mc)
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ml.Shutdown() }()
	if _, err := ml.Join(seeds); err != nil {
		t.Fatal(err)
	}
	// Addressed by the seeds' addresses: the *Node values Members returns
	// are mutated by memberlist's packet handler (a data race).
	sent := 0
	for _, s := range seeds {
		host, port, err := hostport.Split(s)
		if err != nil {
			t.Fatal(err)
		}
		to := &memberlist.Node{Name: s, Addr: net.ParseIP(host), Port: uint16(port)}
		if err := ml.SendReliable(to, []byte(membership.LeaveNotice+victim)); err == nil {
			sent++
		}
	}
	if sent == 0 {
		t.Fatal("no leave notice sent")
	}
}

// applyRetry applies entry at the leader, again at the next leader if
// leadership moved before it was appended (nothing was written then).
func applyRetry(t *testing.T, c *testCluster, entry string) {
	t.Helper()
	var err error
	for range 5 {
		if _, err = c.leader().Apply(ctxTimeout(t, 10*time.Second), []byte(entry)); !errors.Is(err, raftgroup.ErrNotLeader) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
