package tlsconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/tlsconfig/pki"
)

// pkiDir is a CA with certificates issued into a temp dir.
type pkiDir struct {
	t   *testing.T
	dir string
	ca  *pki.CA
}

func newPKI(t *testing.T) *pkiDir {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pkiDir{t: t, dir: t.TempDir(), ca: ca}
	if err := ca.WriteCA(p.dir, false); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue writes NAME.pem/NAME-key.pem and returns their paths.
func (p *pkiDir) issue(req pki.Request) Files {
	p.t.Helper()
	c, k, err := p.ca.Issue(req)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := pki.WritePair(p.dir, pki.CertFile(req.Name), pki.KeyFile(req.Name), c, k, true); err != nil {
		p.t.Fatal(err)
	}
	return Files{Cert: filepath.Join(p.dir, pki.CertFile(req.Name)), Key: filepath.Join(p.dir, pki.KeyFile(req.Name)), CA: filepath.Join(p.dir, pki.CAFile)}
}

func (p *pkiDir) pair(req pki.Request) tls.Certificate {
	p.t.Helper()
	f := p.issue(req)
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

func (p *pkiDir) source(name string) *Source {
	p.t.Helper()
	s, err := Load(p.issue(pki.Request{Name: name, Node: true}), quiet)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func TestNodeName(t *testing.T) {
	u := func(s string) *url.URL {
		v, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		uris []*url.URL
		want string
		ok   bool
	}{
		{"node", []*url.URL{pki.NodeURI("n1")}, "n1", true},
		{"node among other URIs", []*url.URL{u("spiffe://x/y"), pki.NodeURI("n-2.a")}, "n-2.a", true},
		{"no URI (client)", nil, "", false},
		{"two node URIs", []*url.URL{pki.NodeURI("n1"), pki.NodeURI("n2")}, "", false},
		{"path", []*url.URL{u("raftq-node://n1/x")}, "", false},
		{"port", []*url.URL{u("raftq-node://n1:80")}, "", false},
		{"user", []*url.URL{u("raftq-node://a@n1")}, "", false},
		{"opaque", []*url.URL{u("raftq-node:n1")}, "", false},
		{"empty host", []*url.URL{u("raftq-node://")}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := NodeName(&x509.Certificate{URIs: tc.uris})
			if got != tc.want || ok != tc.ok {
				t.Fatalf("NodeName = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if _, ok := NodeName(nil); ok {
		t.Fatal("NodeName(nil) ok")
	}
}

func TestLoadRefusesBadMaterial(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	node := p.issue(pki.Request{Name: "n1", Node: true})
	client := p.issue(pki.Request{Name: "alice"})
	expired := p.issue(pki.Request{Name: "old", Node: true, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	foreign := other.issue(pki.Request{Name: "n9", Node: true})
	for _, tc := range []struct {
		name  string
		files Files
		want  string
	}{
		{"missing CA", Files{Cert: node.Cert, Key: node.Key}, "all needed"},
		{"client certificate", client, "not a node certificate"},
		{"expired", expired, "expired at"},
		{"other CA", Files{Cert: foreign.Cert, Key: foreign.Key, CA: node.CA}, "wrong CA"},
		{"key mismatch", Files{Cert: node.Cert, Key: client.Key, CA: node.CA}, "private key does not match"},
		{"CA file is a leaf", Files{Cert: node.Cert, Key: node.Key, CA: node.Cert}, "not a CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.files, quiet)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v; want an error containing %q", err, tc.want)
			}
		})
	}
	s, err := Load(node, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if s.NodeName() != "n1" {
		t.Fatalf("NodeName = %q", s.NodeName())
	}
	certEnd, caEnd := s.NotAfter()
	if !caEnd.Equal(p.ca.Cert.NotAfter) || certEnd.IsZero() {
		t.Fatalf("NotAfter = %v, %v; CA ends %v", certEnd, caEnd, p.ca.Cert.NotAfter)
	}
}

// handshake runs one TLS handshake over loopback and returns the
// client's and the server's errors (the server's includes a 1-byte read,
// which is where TLS 1.3 reports a refused client certificate).
func handshake(t *testing.T, server, client *tls.Config) (cerr, serr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			serr = err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, server)
		if serr = tc.Handshake(); serr != nil {
			return
		}
		_, serr = tc.Write([]byte{1})
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(c, make([]byte, 1))
		c.Close()
	}
	wg.Wait()
	return err, serr
}

func TestHandshakes(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	n1, n2 := p.source("n1"), p.source("n2")
	alice := p.pair(pki.Request{Name: "alice"})
	expiredClient := p.pair(pki.Request{Name: "bob", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	expiredNode := p.pair(pki.Request{Name: "n3", Node: true, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	foreignNode := other.pair(pki.Request{Name: "n2", Node: true})
	foreignClient := other.pair(pki.Request{Name: "alice"})

	withCert := func(c tls.Certificate) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{c}, InsecureSkipVerify: true}
	}
	staticServer := func(c tls.Certificate) *tls.Config { return &tls.Config{Certificates: []tls.Certificate{c}} }
	caOnly, err := ClientConfig(filepath.Join(p.dir, pki.CAFile), "", "")
	if err != nil {
		t.Fatal(err)
	}
	caOnly.ServerName = "127.0.0.1"

	for _, tc := range []struct {
		name         string
		server       *tls.Config
		client       *tls.Config
		wantClient   string // "" = success
		wantServer   string
		serverFailed bool
	}{
		{"gRPC: no client certificate", n1.ServerConfig("grpc"), caOnly, "", "", false},
		{"gRPC: client certificate", n1.ServerConfig("grpc"), withCert(alice), "", "", false},
		{"gRPC: node certificate", n1.ServerConfig("grpc"), n2.NodeClientConfig("n1"), "", "", false},
		{"gRPC: client certificate from another CA", n1.ServerConfig("grpc"), withCert(foreignClient), "bad certificate", "wrong CA", true},
		{"gRPC: expired client certificate", n1.ServerConfig("grpc"), withCert(expiredClient), "bad certificate", "expired at", true},
		{"raft: node certificate", n1.NodeServerConfig("raft"), n2.NodeClientConfig("n1"), "", "", false},
		{"raft: client certificate", n1.NodeServerConfig("raft"), withCert(alice), "bad certificate", "not a node certificate", true},
		{"raft: no certificate", n1.NodeServerConfig("raft"), caOnly, "certificate required", "", true},
		{"raft: node certificate from another CA", n1.NodeServerConfig("raft"), withCert(foreignNode), "bad certificate", "wrong CA", true},
		{"raft: expired node certificate", n1.NodeServerConfig("raft"), withCert(expiredNode), "bad certificate", "expired at", true},
		{"dial: wrong node", n1.NodeServerConfig("raft"), n2.NodeClientConfig("n7"), `expected node "n7", but the certificate is node "n1"`, "", true},
		{"dial: server from another CA", staticServer(foreignNode), n1.NodeClientConfig("n2"), "wrong CA", "", true},
		{"dial: expired server", staticServer(expiredNode), n1.NodeClientConfig("n3"), "expired at", "", true},
		{"dial: server with a client certificate", staticServer(alice), n1.NodeClientConfig("alice"), "not for server use", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr, serr := handshake(t, tc.server, tc.client)
			if tc.wantClient == "" {
				if cerr != nil || serr != nil {
					t.Fatalf("client err %v, server err %v; want success", cerr, serr)
				}
				return
			}
			if cerr == nil || !strings.Contains(cerr.Error(), tc.wantClient) {
				t.Fatalf("client err %v; want one containing %q", cerr, tc.wantClient)
			}
			if tc.serverFailed && serr == nil {
				t.Fatal("the server accepted the connection")
			}
			if tc.wantServer != "" && !strings.Contains(serr.Error(), tc.wantServer) {
				t.Fatalf("server err %v; want one containing %q", serr, tc.wantServer)
			}
		})
	}
}

// TestRefusalIsLogged: the operator of the refusing node sees why.
func TestRefusalIsLogged(t *testing.T) {
	p := newPKI(t)
	var buf syncBuffer
	s, err := Load(p.issue(pki.Request{Name: "n1", Node: true}), slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	alice := p.pair(pki.Request{Name: "alice"})
	if _, serr := handshake(t, s.NodeServerConfig("raft"), &tls.Config{Certificates: []tls.Certificate{alice}, InsecureSkipVerify: true}); serr == nil {
		t.Fatal("accepted")
	}
	if got := buf.String(); !strings.Contains(got, "refused a peer certificate") || !strings.Contains(got, "listener=raft") ||
		!strings.Contains(got, "not a node certificate") {
		t.Fatalf("log: %s", got)
	}
}

func TestReloadRotatesCertificateAndCA(t *testing.T) {
	p := newPKI(t)
	files := p.issue(pki.Request{Name: "n1", Node: true})
	s, err := Load(files, quiet)
	if err != nil {
		t.Fatal(err)
	}
	peer := p.source("n2")
	serial := func() string {
		t.Helper()
		var got string
		cfg := peer.NodeClientConfig("n1")
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0].SerialNumber.String()
			return verify(cs)
		}
		if cerr, serr := handshake(t, s.NodeServerConfig("raft"), cfg); cerr != nil || serr != nil {
			t.Fatalf("handshake: %v / %v", cerr, serr)
		}
		return got
	}
	first := serial()

	// A new certificate from the same CA: served after Reload.
	p.issue(pki.Request{Name: "n1", Node: true})
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	second := serial()
	if second == first {
		t.Fatal("the old certificate is still served after Reload")
	}

	// A broken file keeps the current material.
	if err := os.WriteFile(files.Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("Reload of garbage succeeded")
	}
	if serial() != second {
		t.Fatal("a failed reload changed the certificate")
	}

	// CA rotation: a bundle of old and new CA, then a certificate of the
	// new CA, then the old CA dropped: peers of the old CA are refused.
	newCA, err := pki.NewCA("new CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(append([]byte{}, p.ca.CertPEM...), newCA.CertPEM...)
	if err := os.WriteFile(files.CA, bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	c, k, err := newCA.Issue(pki.Request{Name: "n1", Node: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(p.dir, pki.CertFile("n1"), pki.KeyFile("n1"), c, k, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := peer.Reload(); err != nil { // it shares the CA file: trusts both now
		t.Fatal(err)
	}
	if _, serr := handshake(t, s.NodeServerConfig("raft"), peer.NodeClientConfig("n1")); serr != nil {
		t.Fatalf("old-CA peer refused while both CAs are trusted: %v", serr)
	}
	if err := os.WriteFile(files.CA, newCA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, serr := handshake(t, s.NodeServerConfig("raft"), peer.NodeClientConfig("n1")); serr == nil || !strings.Contains(serr.Error(), "wrong CA") {
		t.Fatalf("old-CA peer after the old CA was dropped: %v", serr)
	}
}

func TestWatchReloadsChangedFiles(t *testing.T) {
	p := newPKI(t)
	s, err := Load(p.issue(pki.Request{Name: "n1", Node: true}), quiet)
	if err != nil {
		t.Fatal(err)
	}
	before := s.cur.Load().cert.Leaf.SerialNumber
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	p.issue(pki.Request{Name: "n1", Node: true})
	deadline := time.Now().Add(10 * time.Second)
	for s.cur.Load().cert.Leaf.SerialNumber.Cmp(before) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not reload the rewritten certificate")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClientConfig(t *testing.T) {
	p := newPKI(t)
	alice := p.issue(pki.Request{Name: "alice"})
	expired := p.issue(pki.Request{Name: "bob", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	cfg, err := ClientConfig(alice.CA, alice.Cert, alice.Key)
	if err != nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil {
		t.Fatalf("ClientConfig: %+v, %v", cfg, err)
	}
	if _, err := ClientConfig(alice.CA, alice.Cert, ""); err == nil {
		t.Fatal("certificate without key accepted")
	}
	if _, err := ClientConfig(alice.CA, expired.Cert, expired.Key); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired client certificate: %v", err)
	}
	if _, err := ClientConfig(filepath.Join(p.dir, "nope.pem"), "", ""); err == nil {
		t.Fatal("missing CA file accepted")
	}
}

func TestVerifyPeerWording(t *testing.T) {
	p := newPKI(t)
	future := p.pair(pki.Request{Name: "n1", Node: true, NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})
	leaf, err := x509.ParseCertificate(future.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	_, err = verifyPeer([]*x509.Certificate{leaf}, pool, x509.ExtKeyUsageServerAuth, time.Now())
	var inv x509.CertificateInvalidError
	if err == nil || !strings.Contains(err.Error(), "not valid before") || !errors.As(err, &inv) {
		t.Fatalf("verifyPeer: %v", err)
	}
	if _, err := verifyPeer(nil, pool, x509.ExtKeyUsageServerAuth, time.Now()); err == nil {
		t.Fatal("no certificate accepted")
	}
	// The CA file may hold other PEM blocks (a key by mistake) besides
	// certificates.
	mixed := filepath.Join(t.TempDir(), "mixed.pem")
	blob := append(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{1}}), p.ca.CertPEM...)
	if err := os.WriteFile(mixed, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, certs, err := loadPool(mixed); err != nil || len(certs) != 1 {
		t.Fatalf("loadPool: %d, %v", len(certs), err)
	}
}

var quiet = slog.New(slog.DiscardHandler)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
