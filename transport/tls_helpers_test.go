package transport

import (
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/tlsconfig/pki"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA and the certificates a test issues from it, as files
// (what a node loads) in a temp dir.
type testPKI struct {
	dir string
	ca  *pki.CA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca}
	if err := ca.WriteCA(p.dir, false); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *testPKI) caFile() string { return filepath.Join(p.dir, pki.CAFile) }

// issue writes a certificate for req and returns its files.
func (p *testPKI) issue(t *testing.T, req pki.Request) tlsconfig.Files {
	t.Helper()
	c, k, err := p.ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(p.dir, pki.CertFile(req.Name), pki.KeyFile(req.Name), c, k, true); err != nil {
		t.Fatal(err)
	}
	return tlsconfig.Files{Cert: filepath.Join(p.dir, pki.CertFile(req.Name)), Key: filepath.Join(p.dir, pki.KeyFile(req.Name)), CA: p.caFile()}
}

// source is node id's material, as a node loads it.
func (p *testPKI) source(t *testing.T, id string) *tlsconfig.Source {
	t.Helper()
	s, err := tlsconfig.Load(p.issue(t, pki.Request{Name: id, Node: true}), inprocLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pair is a certificate and key for req, to present by hand.
func (p *testPKI) pair(t *testing.T, req pki.Request) tls.Certificate {
	t.Helper()
	f := p.issue(t, req)
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientCreds trusts the CA and presents client certificate name (none
// if "").
func (p *testPKI) clientCreds(t *testing.T, name string) credentials.TransportCredentials {
	t.Helper()
	cert, key := "", ""
	if name != "" {
		f := p.issue(t, pki.Request{Name: name})
		cert, key = f.Cert, f.Key
	}
	cfg, err := tlsconfig.ClientConfig(p.caFile(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}

// expired is a request for name's certificate that expired an hour ago.
func expired(name string, node bool) pki.Request {
	return pki.Request{Name: name, Node: node, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}
}

func tlsClientConfigFiles(ca, cert, key string) (*tls.Config, error) {
	return tlsconfig.ClientConfig(ca, cert, key)
}

// clusterTLS is what serve gives Raft (cmd/raftq/serve.go clusterTLS).
func clusterTLS(src *tlsconfig.Source) *cluster.TLS {
	if src == nil {
		return nil
	}
	return &cluster.TLS{Server: src.NodeServerConfig("raft"), Dial: src.NodeClientConfig, PeerName: tlsconfig.PeerNodeName}
}
