package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/tlsconfig"
)

// runArgs runs a command line without a broker.
func runArgs(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &out, &errOut, func(string) string { return "" })
	return result{code, out.String(), errOut.String()}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkKey: 0600, PKCS#8 ECDSA P-256, and the certificate's key.
func checkKey(t *testing.T, path string, cert *x509.Certificate) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		t.Fatalf("%s: %T, want an ECDSA P-256 key", path, k)
	}
	if !ek.PublicKey.Equal(cert.PublicKey) {
		t.Fatalf("%s does not match its certificate", path)
	}
}

func TestCertCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if r := runArgs(t, "cert", "init", "--dir", dir); r.code != 0 {
		t.Fatalf("cert init: %+v", r)
	}
	if r := runArgs(t, "cert", "init", "--dir", dir); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("cert init over an existing CA: %+v", r)
	}
	if r := runArgs(t, "cert", "node", "--dir", dir, "--name", "n1", "--host", "10.0.0.1,node1.example"); r.code != 0 {
		t.Fatalf("cert node: %+v", r)
	}
	if r := runArgs(t, "cert", "client", "--dir", dir, "--name", "alice", "--valid-for", "720h"); r.code != 0 {
		t.Fatalf("cert client: %+v", r)
	}
	for _, bad := range [][]string{
		{"cert", "node", "--dir", dir, "--name", "../x"},
		{"cert", "node", "--dir", dir},
		{"cert", "client", "--dir", filepath.Join(dir, "none"), "--name", "bob"},
	} {
		if r := runArgs(t, bad...); r.code == 0 {
			t.Fatalf("%v succeeded", bad)
		}
	}

	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA: IsCA %v, usage %v", ca.IsCA, ca.KeyUsage)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life < 9*365*24*time.Hour {
		t.Fatalf("CA lifetime %v", life)
	}
	checkKey(t, filepath.Join(dir, "ca-key.pem"), ca)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	node := readCert(t, filepath.Join(dir, "n1.pem"))
	checkKey(t, filepath.Join(dir, "n1-key.pem"), node)
	if name, ok := tlsconfig.NodeName(node); !ok || name != "n1" {
		t.Fatalf("node certificate: NodeName = %q, %v", name, ok)
	}
	if len(node.URIs) != 1 || node.URIs[0].String() != "raftq-node://n1" {
		t.Fatalf("node URIs %v", node.URIs)
	}
	if !slices.Contains(node.DNSNames, "node1.example") || !slices.Contains(node.DNSNames, "localhost") {
		t.Fatalf("node DNS SANs %v", node.DNSNames)
	}
	if !slices.ContainsFunc(node.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.0.0.1")) }) ||
		!slices.ContainsFunc(node.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("127.0.0.1")) }) {
		t.Fatalf("node IP SANs %v", node.IPAddresses)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := node.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: "10.0.0.1"}); err != nil {
			t.Fatalf("node certificate for usage %v: %v", usage, err)
		}
	}
	if life := node.NotAfter.Sub(node.NotBefore); life < 300*24*time.Hour || life > 400*24*time.Hour {
		t.Fatalf("node certificate lifetime %v, want about a year", life)
	}

	client := readCert(t, filepath.Join(dir, "alice.pem"))
	checkKey(t, filepath.Join(dir, "alice-key.pem"), client)
	if client.Subject.CommonName != "alice" {
		t.Fatalf("client CN %q", client.Subject.CommonName)
	}
	if _, ok := tlsconfig.NodeName(client); ok || len(client.URIs) != 0 {
		t.Fatalf("client certificate carries a node SAN: %v", client.URIs)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("a client certificate is good for server use")
	}
	if end := time.Until(client.NotAfter); end > 721*time.Hour || end < 700*time.Hour {
		t.Fatalf("--valid-for 720h gave a certificate ending in %v", end)
	}
	// A node loads what `raftq cert node` wrote.
	if _, err := tlsconfig.Load(tlsconfig.Files{Cert: filepath.Join(dir, "n1.pem"), Key: filepath.Join(dir, "n1-key.pem"), CA: filepath.Join(dir, "ca.pem")}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDevTLS: raftq dev --tls makes what each node loads and the client
// flags it prints.
func TestDevTLS(t *testing.T) {
	dir := t.TempDir()
	flags, client, err := makeDevTLS(dir, []string{"n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2"} {
		f := flags[id]
		if len(f) != 10 || f[0] != "--tls-cert" || f[6] != "--gossip-key-file" || f[8] != "--admin-cn" || f[9] != "dev" {
			t.Fatalf("%s flags %v", id, f)
		}
		src, err := tlsconfig.Load(tlsconfig.Files{Cert: f[1], Key: f[3], CA: f[5]}, nil)
		if err != nil || src.NodeName() != id {
			t.Fatalf("%s: %v", id, err)
		}
		if keys, err := readGossipKeys(f[7], slogDiscard()); err != nil || len(keys) != 1 {
			t.Fatalf("gossip keys: %v", err)
		}
	}
	if len(client) != 6 || client[0] != "--tls-ca" {
		t.Fatalf("client flags %v", client)
	}
	if c := readCert(t, client[3]); c.Subject.CommonName != "dev" || len(c.URIs) != 0 {
		t.Fatalf("client certificate %v %v", c.Subject, c.URIs)
	}
}
