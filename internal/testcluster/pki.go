package testcluster

import (
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/tlsconfig/pki"
	"google.golang.org/grpc/credentials"
)

// PKI is a CA and the certificates a test issues from it, as files (what
// a node loads) in a temp dir. Options.TLS runs a cluster's every port
// over TLS with node certificates of one.
type PKI struct {
	dir string
	ca  *pki.CA
}

// NewPKI makes a CA valid for an hour.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{dir: t.TempDir(), ca: ca}
	if err := ca.WriteCA(p.dir, false); err != nil {
		t.Fatal(err)
	}
	return p
}

// CAFile is the CA certificate's file.
func (p *PKI) CAFile() string { return filepath.Join(p.dir, pki.CAFile) }

// Issue writes a certificate for req and returns its files.
func (p *PKI) Issue(t testing.TB, req pki.Request) tlsconfig.Files {
	t.Helper()
	c, k, err := p.ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(p.dir, pki.CertFile(req.Name), pki.KeyFile(req.Name), c, k, true); err != nil {
		t.Fatal(err)
	}
	return tlsconfig.Files{Cert: filepath.Join(p.dir, pki.CertFile(req.Name)), Key: filepath.Join(p.dir, pki.KeyFile(req.Name)), CA: p.CAFile()}
}

// Source is node id's material, as a node loads it.
func (p *PKI) Source(t testing.TB, id string) *tlsconfig.Source {
	t.Helper()
	s, err := tlsconfig.Load(p.Issue(t, pki.Request{Name: id, Node: true}), Logger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Pair is a certificate and key for req, to present by hand.
func (p *PKI) Pair(t testing.TB, req pki.Request) tls.Certificate {
	t.Helper()
	f := p.Issue(t, req)
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientCreds trusts the CA and presents client certificate name (none
// if "").
func (p *PKI) ClientCreds(t testing.TB, name string) credentials.TransportCredentials {
	t.Helper()
	cert, key := "", ""
	if name != "" {
		f := p.Issue(t, pki.Request{Name: name})
		cert, key = f.Cert, f.Key
	}
	cfg, err := tlsconfig.ClientConfig(p.CAFile(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}
