package transport_test

// Helpers for in-process cluster tests (DESIGN testing tier 3): nodes
// built by host.New, as raftq serve builds them, through the one kit
// (internal/testcluster), over loopback.

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/tlsconfig/pki"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inprocOpts is what these tests vary of a cluster; startInproc turns it
// into the kit's options.
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
	tls            *testcluster.PKI
	auth           auth.Mode    // "" = none
	bootstrapToken string       // accepted as an admin token by every node
	logger         *slog.Logger // nil = testcluster.Logger()
	carryGrants    bool         // broker.Config.CarryGrants
	// logVersion is what every node advertises (0 = this build's newest),
	// so the cluster version stays there, as during a rolling upgrade.
	logVersion uint32
	// nodeConfig, if set, adjusts each node's cluster config (by node id)
	// before it starts.
	nodeConfig func(id string, c *cluster.Config)
	// adjust, if set, adjusts each node's whole configuration (by node
	// id) before it starts, after the fields above.
	adjust func(id string, c *host.Config)
}

// startInproc starts o.nodes nodes through the kit (the first is the
// gossip seed), waits for a stable leader known to every node (unless
// o.noWait) and registers a cleanup that stops everything and checks no
// goroutine is left behind.
func startInproc(t *testing.T, o inprocOpts) *testcluster.Cluster {
	t.Helper()
	if o.replicaCheck == 0 {
		o.replicaCheck = -1
	}
	log := o.logger
	if o.logs != nil {
		log = slog.New(slog.NewTextHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return testcluster.Start(t, testcluster.Options{
		Nodes:  o.nodes,
		Expect: o.expect,
		Logger: log,
		NoWait: o.noWait,
		TLS:    o.tls,
		Adjust: func(id string, c *host.Config) {
			c.Node.MaxQueuedBytes = o.maxQueuedBytes
			c.Node.Audit = o.audit
			c.Node.CarryGrants = o.carryGrants
			c.Node.Cluster.LogVersion = o.logVersion
			c.API.LeaderWait = o.leaderWait
			c.Node.ReplicaCheckInterval = o.replicaCheck
			c.Auth.Mode = o.auth
			c.Auth.BootstrapToken = o.bootstrapToken
			if o.nodeConfig != nil {
				o.nodeConfig(id, &c.Node.Cluster)
			}
			if o.adjust != nil {
				o.adjust(id, c)
			}
		},
	})
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

// waitUntil polls cond until it returns nil, failing the test with its last
// error when timeout passes (harness.WaitFor, the one wait of every test).
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := harness.WaitFor(context.Background(), timeout, 10*time.Millisecond, func(context.Context) error { return cond() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
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
func checkRedirect(t *testing.T, err error, reason string, leader *testcluster.Node) {
	t.Helper()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable %s", err, reason)
	}
	ei := errorInfo(err)
	if ei == nil || ei.Reason != reason {
		t.Fatalf("got %v with ErrorInfo %v, want reason %s", err, ei, reason)
	}
	if leader != nil && (ei.Metadata["leader_id"] != leader.ID || ei.Metadata["leader_addr"] != leader.Addrs.GRPC) {
		t.Fatalf("redirect metadata %v, want leader_id %s leader_addr %s", ei.Metadata, leader.ID, leader.Addrs.GRPC)
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

// expired is a request for name's certificate that expired an hour ago.
func expired(name string, node bool) pki.Request {
	return pki.Request{Name: name, Node: node, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}
}

func tlsClientConfigFiles(ca, cert, key string) (*tls.Config, error) {
	return tlsconfig.ClientConfig(ca, cert, key)
}
