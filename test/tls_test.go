package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// TestTLSCluster: three real processes with TLS on every port. The
// cluster forms over mutual TLS and takes writes at any node; the HTTP
// port is HTTPS and exports the certificate's expiry; the CLI needs the
// CA; a certificate rewritten on disk is served after SIGHUP, without a
// restart.
func TestTLSCluster(t *testing.T) {
	p, err := harness.NewTLS(binary, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*harness.Node, 3)
	for i := range nodes {
		nodes[i] = harness.TestNode(t, binary, fmt.Sprintf("n%d", i+1))
		if err := nodes[i].UseTLS(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		n.Args = append(n.Args, harness.JoinFlags(nodes)...)
		n.Start()
	}
	c := harness.Dial(t, nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, c, nodes[0], 3)
	for _, n := range nodes {
		one := harness.Dial(t, n)
		q := "q-" + n.ID
		harness.Eventually(t, 30*time.Second, func() error {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			defer ccancel()
			_, err := one.CreateQueue(cctx, q, nil)
			if err != nil && strings.Contains(err.Error(), "AlreadyExists") {
				return nil
			}
			return err
		})
		if _, err := one.EnqueuePayloads(ctx, q, []byte("hello")); err != nil {
			t.Fatalf("enqueue at %s: %v", n.ID, err)
		}
	}

	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer https.CloseIdleConnections()
	get := func(url string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+p.Token) // TLS on: auth on
		resp, err := https.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("https://" + nodes[0].HTTP + "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz over HTTPS: %d %s", code, body)
	}
	if _, body := get("https://" + nodes[0].HTTP + "/metrics"); !strings.Contains(body, `raftq_tls_cert_not_after_timestamp_seconds{cert="node"}`) ||
		!strings.Contains(body, `raftq_tls_cert_not_after_timestamp_seconds{cert="ca"}`) {
		t.Fatal("no certificate expiry metric")
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + nodes[0].HTTP + "/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the HTTP port answered plaintext")
		}
	}

	cli := func(args ...string) (string, error) {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, binary, append([]string{"--addr", nodes[1].GRPC}, args...)...)
		cmd.Env = append(os.Environ(), "RAFTQ_CLIENT_TLS_CA=", "RAFTQ_ADDR=", "RAFTQ_TOKEN=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("queue", "list"); err == nil || !strings.Contains(out, "--tls-ca") {
		t.Fatalf("CLI without the CA: %v %s", err, out)
	}
	if out, err := cli("--tls-ca", p.CAFile(), "queue", "list"); err == nil || !strings.Contains(out, "Unauthenticated") {
		t.Fatalf("CLI with the CA, without a token: %v %s", err, out)
	}
	if out, err := cli("--tls-ca", p.CAFile(), "--token-file", p.TokenFile(), "queue", "list"); err != nil || !strings.Contains(out, "q-n1") {
		t.Fatalf("CLI with the CA: %v %s", err, out)
	}

	// Rotation: a new certificate on disk is served after SIGHUP.
	serial := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", nodes[0].GRPC, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	if _, err := p.NodeFlags(nodes[0].ID, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Reload(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, func() error {
		if s := serial(); s == before {
			return fmt.Errorf("still serving serial %s", s)
		}
		return nil
	})
	// The node still works with the cluster (Raft and forwarding use the
	// new certificate for new connections).
	if _, err := harness.Dial(t, nodes[0]).EnqueuePayloads(ctx, "q-n1", []byte("after rotation")); err != nil {
		t.Fatal(err)
	}
}
