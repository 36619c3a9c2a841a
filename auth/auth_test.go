package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"github.com/raftq/raftq/tlsconfig/pki"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// stateWith is a replicated auth state holding one token for identity
// "alice" (secret "alice-secret") that expires at expires (0: never).
func stateWith(t *testing.T, expires int64) *fsm.FSM {
	t.Helper()
	f := fsm.New(fsm.Options{})
	h := HashOf("alice-secret")
	for i, cmd := range []*fsmv1.Command{
		{Version: 5, NowMs: 1000, Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: 5}}},
		{Version: 5, NowMs: 1000, Op: &fsmv1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{Name: "a1", Identity: "alice", Sha256: h[:], ExpiresUnixMs: expires}}},
		{Version: 5, NowMs: 1000, Op: &fsmv1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{Identity: "alice", Pattern: "jobs.*", Perms: uint32(fsm.PermProduce)}}},
	} {
		if err := f.ApplyCommand(uint64(i+1), cmd).Failure(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func withPeer(ctx context.Context, cert *x509.Certificate) context.Context {
	p := &peer.Peer{}
	if cert != nil {
		p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
	}
	return peer.NewContext(ctx, p)
}

func nodeCert(name string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: name}, URIs: []*url.URL{pki.NodeURI(name)}}
}

func clientCert(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
}

func TestAuthenticate(t *testing.T) {
	const boot = "boot-secret"
	f := stateWith(t, 0)
	newA := func(mode Mode) *Authenticator {
		return New(Config{Mode: mode, BootstrapToken: boot, AdminCN: "ops", State: f.Reader().Auth})
	}
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	forged := []string{"raftq-identity", "ops", "raftq-identity-kind", "certificate", "raftq-identity-admin", "true"}
	for _, c := range []struct {
		name  string
		mode  Mode
		ctx   context.Context
		cert  *x509.Certificate
		want  string // "kind:name", or "" for UNAUTHENTICATED
		admin bool
	}{
		{"auth off", ModeNone, context.Background(), nil, "anonymous:anonymous", true},
		{"nothing", ModeToken, context.Background(), nil, "", false},
		{"token", ModeToken, md("authorization", "Bearer alice-secret"), nil, "token:alice", false},
		{"scheme in any case", ModeToken, md("authorization", "bearer alice-secret"), nil, "token:alice", false},
		{"unknown token", ModeToken, md("authorization", "Bearer nope"), nil, "", false},
		{"not bearer", ModeToken, md("authorization", "Basic alice-secret"), nil, "", false},
		{"bootstrap", ModeToken, md("authorization", "Bearer "+boot), nil, "bootstrap:bootstrap", true},
		{"client cert in token mode", ModeToken, context.Background(), clientCert("carol"), "certificate:carol", false},
		{"admin cn", ModeMTLS, context.Background(), clientCert("ops"), "certificate:ops", true},
		{"mtls ignores tokens", ModeMTLS, md("authorization", "Bearer alice-secret"), nil, "", false},
		{"mtls cert wins over token", ModeMTLS, md("authorization", "Bearer alice-secret"), clientCert("carol"), "certificate:carol", false},
		{"unusable cn", ModeMTLS, context.Background(), clientCert("carol smith"), "", false},
		{"forged identity, no cert", ModeToken, md(forged...), nil, "", false},
		{"forged identity from a client cert", ModeToken, md(forged...), clientCert("carol"), "certificate:carol", false},
		{"forged identity with a token", ModeToken, md(append(forged, "authorization", "Bearer alice-secret")...), nil, "token:alice", false},
		{"node speaks for a cert caller", ModeToken, md(forged...), nodeCert("n2"), "certificate:ops", true},
		{"node forwards a token", ModeToken, md("authorization", "Bearer alice-secret"), nodeCert("n2"), "token:alice", false},
		{"node may not name a token identity", ModeToken, md("raftq-identity", "alice", "raftq-identity-kind", "token"), nodeCert("n2"), "node:n2", true},
		{"node on its own", ModeMTLS, context.Background(), nodeCert("n2"), "node:n2", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newA(c.mode)
			p, err := a.Authenticate(withPeer(c.ctx, c.cert))
			if c.want == "" {
				if status.Code(err) != codes.Unauthenticated {
					t.Fatalf("got %v, %v; want UNAUTHENTICATED", p, err)
				}
				return
			}
			if err != nil || p.String() != c.want || a.IsAdmin(p) != c.admin {
				t.Fatalf("got %v (admin %v), %v; want %s admin %v", p, p != nil && a.IsAdmin(p), err, c.want, c.admin)
			}
		})
	}
}

func TestTokenExpiresByTheNodesClock(t *testing.T) {
	f := stateWith(t, 5000)
	now := time.UnixMilli(4999)
	a := New(Config{Mode: ModeToken, State: f.Reader().Auth, Now: func() time.Time { return now }})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice-secret"))
	if _, err := a.Authenticate(ctx); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	now = time.UnixMilli(5000)
	if _, err := a.Authenticate(ctx); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("at expiry: %v", err)
	}
}

// TestOutgoingCarriesTheCaller: what a node sends to a peer for a caller
// authenticates as that caller there.
func TestOutgoingCarriesTheCaller(t *testing.T) {
	f := stateWith(t, 0)
	a := New(Config{Mode: ModeToken, BootstrapToken: "boot", AdminCN: "ops", State: f.Reader().Auth})
	for _, c := range []struct {
		name   string
		caller context.Context
		want   string
	}{
		{"token", metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice-secret")), "token:alice"},
		{"certificate", withPeer(context.Background(), clientCert("ops")), "certificate:ops"},
		{"the node itself", nil, "bootstrap:bootstrap"},
	} {
		ctx := context.Background()
		if c.caller != nil {
			p, err := a.Authenticate(c.caller)
			if err != nil {
				t.Fatal(err)
			}
			ctx = WithPrincipal(ctx, p)
		}
		out, _ := metadata.FromOutgoingContext(a.Outgoing(ctx))
		// At the peer, over a connection with this node's certificate.
		p, err := a.Authenticate(withPeer(metadata.NewIncomingContext(context.Background(), out), nodeCert("n1")))
		if err != nil || p.String() != c.want {
			t.Errorf("%s: peer sees %v, %v; want %s", c.name, p, err, c.want)
		}
	}
}
