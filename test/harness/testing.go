package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
)

// TestNode prepares (does not start) a node of bin for t: fresh loopback
// ports, data and log in a temp dir. When t ends the node is killed, and
// if t failed the end of its log is printed (after a goroutine dump into
// it with RAFTQ_TEST_DUMP set).
func TestNode(t testing.TB, bin, id string, extra ...string) *Node {
	t.Helper()
	n, err := NewNode(NodeConfig{ID: id, Bin: bin, Dir: t.TempDir(), Args: extra})
	if err != nil {
		t.Fatal(err)
	}
	n.t = t
	t.Cleanup(func() {
		if p := n.process(); p != nil && t.Failed() && os.Getenv("RAFTQ_TEST_DUMP") != "" {
			_ = p.Signal(syscall.SIGQUIT, StopTimeout) // goroutine dump into the log
		}
		n.Kill()
		if t.Failed() {
			t.Logf("---- log of %s (last 1 MiB) ----\n%s", n.ID, n.LogTail(1<<20))
		}
	})
	return n
}

// Dial connects a client to the given nodes, with the first one's TLS
// and token (as an admin) if it has them; it is closed when t ends.
func Dial(t testing.TB, nodes ...*Node) *client.Client {
	t.Helper()
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.GRPC)
	}
	var opts []client.Option
	switch {
	case len(nodes) == 0:
	case nodes[0].TLS != nil:
		opts = append(opts, nodes[0].TLS.ClientOptions()...) // its bootstrap token included
	case nodes[0].Token != "":
		opts = append(opts, client.WithToken(nodes[0].Token))
	}
	if os.Getenv("RAFTQ_TEST_CLIENT_LOG") != "" {
		opts = append(opts, client.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	c, err := client.Dial(context.Background(), seeds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// WaitReady waits until ListQueues through c answers, which needs a
// leader, or until ctx ends. A node holds the call until it knows a
// leader, so each probe may wait as long as an election takes: cutting it
// short (it was 2 s) made the node count a Canceled call that tests
// reading raftq_rpc_total then blamed on the code under test.
func WaitReady(ctx context.Context, c *client.Client) error {
	err := WaitFor(ctx, 0, 50*time.Millisecond, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := c.ListQueues(cctx, "")
		return err
	})
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	return nil
}
