package main

import (
	"bytes"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCertCluster: one run makes a CA (kept apart), node and client
// certificates signed by it and a bootstrap token; a second run keeps
// every file as it was; a dir holding another CA's certificate is refused.
func TestCertCluster(t *testing.T) {
	caDir, dir := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "tls")
	token, gossip := filepath.Join(dir, "bootstrap-token"), filepath.Join(dir, "gossip-key")
	args := []string{"cert", "cluster", "--ca-dir", caDir, "--dir", dir, "--node", "n1,n2", "--client", "admin",
		"--host", "10.0.0.9", "--bootstrap-token-file", token, "--gossip-key-file", gossip}
	r := runArgs(t, args...)
	if r.code != 0 || strings.Count(r.stdout, "made ") != 7 || strings.Contains(r.stdout, "kept ") {
		t.Fatalf("first run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	files := map[string][]byte{}
	for _, name := range []string{"ca.pem", "n1.pem", "n1-key.pem", "n2.pem", "n2-key.pem", "admin.pem", "admin-key.pem", "bootstrap-token", "gossip-key"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err == nil {
		t.Fatal("the CA key was written beside the nodes' files")
	}
	if ca, _ := os.ReadFile(filepath.Join(caDir, "ca.pem")); !bytes.Equal(ca, files["ca.pem"]) {
		t.Fatal("dir/ca.pem is not the CA of --ca-dir")
	}
	caCert := readCert(t, filepath.Join(caDir, "ca.pem"))
	n1 := readCert(t, filepath.Join(dir, "n1.pem"))
	if err := n1.CheckSignatureFrom(caCert); err != nil {
		t.Fatalf("n1 not signed by the CA: %v", err)
	}
	if len(n1.URIs) != 1 || n1.URIs[0].String() != "raftq-node://n1" || !slices.Contains(n1.DNSNames, "n1") || !slices.ContainsFunc(n1.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.0.0.9")) }) {
		t.Fatalf("n1's certificate: URIs %v DNS %v IPs %v", n1.URIs, n1.DNSNames, n1.IPAddresses)
	}
	checkKey(t, filepath.Join(dir, "n1-key.pem"), n1)
	if admin := readCert(t, filepath.Join(dir, "admin.pem")); admin.Subject.CommonName != "admin" || len(admin.URIs) != 0 {
		t.Fatalf("client certificate: CN %q URIs %v", admin.Subject.CommonName, admin.URIs)
	}
	fi, err := os.Stat(token)
	if err != nil || fi.Mode().Perm() != 0o600 || len(strings.TrimSpace(string(files["bootstrap-token"]))) < 32 {
		t.Fatalf("token file: %v %v %q", fi.Mode(), err, files["bootstrap-token"])
	}

	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(files["gossip-key"])))
	if fi, _ := os.Stat(gossip); err != nil || len(key) != 32 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("gossip key file: %d bytes, %v, %v", len(key), err, fi.Mode())
	}

	r = runArgs(t, args...)
	if r.code != 0 || strings.Count(r.stdout, "kept ") != 7 || strings.Contains(r.stdout, "made ") {
		t.Fatalf("second run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for name, b := range files {
		if now, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(now, b) {
			t.Fatalf("the second run changed %s", name)
		}
	}

	// Another CA for the same dir: refused, nothing changed.
	r = runArgs(t, "cert", "cluster", "--ca-dir", filepath.Join(t.TempDir(), "other"), "--dir", dir, "--node", "n3")
	if r.code == 0 || !strings.Contains(r.stderr, "another CA") {
		t.Fatalf("another CA: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "n3.pem")); err == nil {
		t.Fatal("a certificate from another CA was written")
	}
}
