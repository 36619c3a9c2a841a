package transport_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/peers"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/tlsconfig/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestTLSClientPort: with TLS on, the gRPC port serves clients that trust
// the CA (with a client certificate or without), and refuses a plaintext
// client, a client that does not trust the node's CA, and client
// certificates from another CA or expired, without changing anything.
func TestTLSClientPort(t *testing.T) {
	p := testcluster.NewPKI(t)
	other := testcluster.NewPKI(t)
	c := startInproc(t, inprocOpts{nodes: 1, tls: p})
	n := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q"}); err != nil {
		t.Fatal(err)
	}

	withCert := func(cert tls.Certificate, roots *testcluster.PKI) credentials.TransportCredentials {
		cfg, err := tlsClientConfig(roots.CAFile())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
		return credentials.NewTLS(cfg)
	}
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		// want: "" = served; otherwise the call fails Unavailable with
		// this in its message. A refused client certificate reaches the
		// client as the server's alert or as the connection it closed,
		// depending on timing (TLS 1.3 finishes the client's handshake
		// first), so those cases only say "refused".
		want string
	}{
		{"CA only", p.ClientCreds(t, ""), ""},
		{"client certificate", p.ClientCreds(t, "alice"), ""},
		// The server drops a plaintext preface: the client sees EOF or a
		// reset, depending on timing, always while reading the preface.
		{"plaintext", insecure.NewCredentials(), "server preface"},
		{"trusts another CA", other.ClientCreds(t, ""), "certificate signed by unknown authority"},
		{"client certificate from another CA", withCert(other.Pair(t, pki.Request{Name: "mallory"}), p), "refused"},
		{"expired client certificate", withCert(p.Pair(t, expired("bob", false)), p), "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := grpc.NewClient(n.Addrs.GRPC, grpc.WithTransportCredentials(tc.creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			_, err = raftqv1.NewBrokerClient(conn).Enqueue(cctx, &raftqv1.EnqueueRequest{Queue: "q", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if status.Code(err) != codes.Unavailable || (tc.want != "refused" && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v; want Unavailable containing %q", err, tc.want)
			}
		})
	}
	// Only the two served calls enqueued.
	q, err := n.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.GetQueue().GetStats().GetReady(); got != 2 {
		t.Fatalf("ready %d, want 2: a refused client changed the queue", got)
	}
}

func tlsClientConfig(caFile string) (*tls.Config, error) {
	return tlsClientConfigFiles(caFile, "", "")
}

// TestForwardDialChecksTheLeader: a follower's calls to another node
// (forwarding, status, digests) accept only that node's certificate from
// the CA: another CA's, an expired one, or another node's is refused with
// an error that says which.
func TestForwardDialChecksTheLeader(t *testing.T) {
	p := testcluster.NewPKI(t)
	other := testcluster.NewPKI(t)
	self := p.Source(t, "n2")
	static := func(c tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{c}})
	}
	for _, tc := range []struct {
		name   string
		server credentials.TransportCredentials
		want   string
	}{
		{"the leader", credentials.NewTLS(p.Source(t, "n1").ServerConfig("grpc")), ""},
		{"another CA", static(other.Pair(t, pki.Request{Name: "n1", Node: true})), "wrong CA"},
		{"expired", static(p.Pair(t, expired("n1", true))), "expired at"},
		{"another node", credentials.NewTLS(p.Source(t, "n3").ServerConfig("grpc")), "but the certificate is node"},
		{"a client certificate", static(p.Pair(t, pki.Request{Name: "n1"})), "not for server use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(grpc.Creds(tc.server))
			healthpb.RegisterHealthServer(srv, health.NewServer())
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(lis) }()
			defer func() { srv.Stop(); <-done }()

			pool := peers.New(self, auth.New(auth.Config{}).ClientUnary)
			defer pool.Close()
			conn, err := pool.Get("n1", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := peers.New(self, nil).Get("", "127.0.0.1:1"); err == nil {
		t.Fatal("a peer with no id was dialled with TLS")
	}
}

// TestTLSForwarding: a three-node TLS cluster takes writes at a follower
// (forwarded to the leader over mutual TLS).
func TestTLSForwarding(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3, tls: testcluster.NewPKI(t)})
	f := c.Followers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "fwd"}); err != nil {
		t.Fatal(err)
	}
	if ids := mustEnqueue(t, f, "fwd", []byte("a"), []byte("b")); len(ids) != 2 {
		t.Fatalf("ids %v", ids)
	}
	st, err := f.Admin.Status(ctx, &raftqv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range st.GetNodes() {
		if nd.GetAppliedIndex() == 0 {
			t.Fatalf("status over TLS: node %s has no applied index (its peer call failed)", nd.GetId())
		}
	}
}
