package test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/test/harness"
)

// TestClientReloadsRotatedCertAndCA: a long-lived SDK client made with
// client.WithTLS keeps working across a CA rotation. The node moves to a
// new CA (its certificate, and the CA file it trusts clients by, both the
// new CA's only) and restarts, so the client must make a new handshake;
// the client's CA file and certificate were rewritten on disk meanwhile.
// A client that kept what it loaded at Dial neither trusts the node's new
// certificate nor holds a certificate the node accepts.
func TestClientReloadsRotatedCertAndCA(t *testing.T) {
	oldCA, err := harness.NewTLS(binary, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := harness.NewTLS(binary, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := harness.TestNode(t, binary, "n1", "--admin-cn", "alice")
	if err := n.UseTLS(oldCA); err != nil {
		t.Fatal(err)
	}
	n.Start()

	// The client's own copies of its files, as a deployment would mount
	// them; install writes a file the way `raftq cert` does (temporary
	// file, rename), key before certificate.
	clientDir := t.TempDir()
	install := func(from, name string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(clientDir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(clientDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	installClient := func(p *harness.TLS) {
		t.Helper()
		cert, key, err := p.Client("alice")
		if err != nil {
			t.Fatal(err)
		}
		install(key, "alice-key.pem")
		install(cert, "alice.pem")
		install(p.CAFile(), "ca.pem")
	}
	installClient(oldCA)
	caFile, certFile, keyFile := filepath.Join(clientDir, "ca.pem"), filepath.Join(clientDir, "alice.pem"), filepath.Join(clientDir, "alice-key.pem")
	// The files as they were before the rotation, to show that the
	// rotation really shuts out the old material.
	oldDir := t.TempDir()
	for _, f := range []string{"ca.pem", "alice.pem", "alice-key.pem"} {
		b, err := os.ReadFile(filepath.Join(clientDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(oldDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, []string{n.GRPC}, client.WithTLS(caFile, certFile, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := harness.WaitReady(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueuePayloads(ctx, "jobs", []byte("before")); err != nil {
		t.Fatal(err)
	}

	// Rotate: the client's files first (it trusts the new CA, shows a
	// certificate of the new CA), then the node (the new CA's certificate,
	// trusting only the new CA), and restart the node so that every
	// connection is made again.
	installClient(newCA)
	if _, err := newCA.NodeFlags(n.ID, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"n1-key.pem", "n1.pem", "ca.pem"} {
		b, err := os.ReadFile(filepath.Join(newCA.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(oldCA.Dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Stop(harness.StopTimeout); err != nil {
		t.Fatal(err)
	}
	n.Start()

	harness.Eventually(t, 60*time.Second, func() error {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := c.EnqueuePayloads(cctx, "jobs", []byte("after"))
		return err
	})
	who, err := c.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if who.GetIdentity() != "alice" {
		t.Fatalf("after the rotation the client is %q, want alice", who.GetIdentity())
	}
	q, err := c.GetQueue(ctx, "jobs", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.GetStats().GetReady(); got != 2 {
		t.Fatalf("%d messages ready, want 2", got)
	}

	// The old material no longer reaches the node: the rotation was real.
	old, err := client.Dial(ctx, []string{n.GRPC}, client.WithTLS(filepath.Join(oldDir, "ca.pem"), filepath.Join(oldDir, "alice.pem"), filepath.Join(oldDir, "alice-key.pem")),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := old.WhoAmI(cctx); err == nil {
		t.Fatal("a client with the old CA and certificate still reaches the node")
	}
}
