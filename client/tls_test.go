package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/tlsconfig/pki"
)

// TestWithTLSReloadsRotatedFiles handshakes, step by step, against a
// server of a new CA that requires a client certificate of that CA, while
// the client's files are rewritten on disk under one set of credentials
// made by WithTLS: each handshake uses what the files hold then, and a
// rewrite that cannot be used keeps the previous material, logged once.
func TestWithTLSReloadsRotatedFiles(t *testing.T) {
	now := time.Now()
	oldCA, err := pki.NewCA("old CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA("new CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := newCA.Issue(pki.Request{Name: "n1", Node: true, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(newCA.CertPEM)
	serverCfg := &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"}} // grpc insists on ALPN

	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "alice.pem"), filepath.Join(dir, "alice-key.pem")
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(ca *pki.CA, name string) {
		t.Helper()
		c, k, err := ca.Issue(pki.Request{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		write(keyFile, k)
		write(certFile, c)
		write(caFile, ca.CertPEM)
	}
	issue(oldCA, "alice-old")

	var logs bytes.Buffer
	var o options
	o.log = slog.New(slog.NewTextHandler(&logs, nil))
	WithTLS(caFile, certFile, keyFile)(&o)
	if o.err != nil {
		t.Fatal(o.err)
	}
	creds := o.creds

	// handshake returns the common name the server saw, or the error.
	handshake := func() (string, error) {
		t.Helper()
		cc, sc := net.Pipe()
		defer cc.Close()
		defer sc.Close()
		seen := make(chan string, 1)
		go func() {
			s := tls.Server(sc, serverCfg)
			if s.Handshake() != nil {
				seen <- ""
				return
			}
			seen <- s.ConnectionState().PeerCertificates[0].Subject.CommonName
			// Hold the server side open until the client is done with it.
			_, _ = s.Read(make([]byte, 1))
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, _, err := creds.ClientHandshake(ctx, "127.0.0.1:7400", cc)
		if err != nil {
			cc.Close()
			<-seen
			return "", err
		}
		defer conn.Close()
		return <-seen, nil
	}

	for _, step := range []struct {
		name     string
		rewrite  func()
		wantCN   string // "" : the handshake fails with wantErr
		wantErr  string
		wantLogs int // "not reloaded" lines logged so far
	}{
		{"old CA and certificate: the new server is not trusted", nil, "", "unknown authority", 0},
		{"rotated to the new CA and certificate", func() { issue(newCA, "alice-new") }, "alice-new", "", 0},
		{"a half-written certificate keeps the previous one", func() { write(certFile, []byte("-----BEGIN CERTIFICATE-----\nMIIB")) }, "alice-new", "", 1},
		{"the same bad file is not logged again", nil, "alice-new", "", 1},
		{"a key that does not match keeps the previous one", func() {
			c, _, err := newCA.Issue(pki.Request{Name: "mallory"})
			if err != nil {
				t.Fatal(err)
			}
			write(certFile, c)
		}, "alice-new", "", 2},
		{"a good pair again is used", func() { issue(newCA, "alice-newer") }, "alice-newer", "", 2},
	} {
		if step.rewrite != nil {
			step.rewrite()
		}
		cn, err := handshake()
		switch {
		case step.wantCN == "" && (err == nil || !strings.Contains(err.Error(), step.wantErr)):
			t.Errorf("%s: handshake error %v, want one with %q", step.name, err, step.wantErr)
		case step.wantCN != "" && (err != nil || cn != step.wantCN):
			t.Errorf("%s: server saw %q (%v), want %q", step.name, cn, err, step.wantCN)
		}
		if got := strings.Count(logs.String(), "TLS material not reloaded"); got != step.wantLogs {
			t.Errorf("%s: %d 'not reloaded' log lines, want %d:\n%s", step.name, got, step.wantLogs, logs.String())
		}
	}
}

func TestWithTLSBadFilesFailDial(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ca, cert, key, want string
	}{
		{"missing CA file", filepath.Join(dir, "nope.pem"), "", "", "TLS CA"},
		{"CA file without a certificate", notPEM, "", "", "holds no PEM certificate"},
		{"certificate without key", "", notPEM, "", "needs both"},
		{"certificate that is not PEM", "", notPEM, notPEM, "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(context.Background(), []string{"127.0.0.1:1"}, WithTLS(tc.ca, tc.cert, tc.key))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Dial: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
