// Package harness runs real raftq processes for black-box tests: it builds
// the binary once, starts nodes on free loopback ports with their own data
// directories, and kills, stops and restarts them. Everything it starts is
// stopped by the test's cleanup.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
)

// Build compiles cmd/raftq into dir (with the race detector when race is
// set) and returns the binary's path.
func Build(dir string, race bool) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "raftq")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/raftq")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// FreePorts reserves n distinct loopback ports, free for TCP and UDP
// (gossip uses both), closed before returning. They are picked below
// Linux's ephemeral range (32768+): a port the kernel handed out for :0 can
// be reused as the source port of an outgoing connection before the node
// binds it.
func FreePorts(n int) ([]int, error) {
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("no free loopback ports in 20000-31999")
		}
		port := 20000 + rand.IntN(12000)
		tl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ul, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			tl.Close()
			continue
		}
		held = append(held, tl, ul)
		ports = append(ports, port)
	}
	return ports, nil
}

// Node is one raftq process.
type Node struct {
	ID                       string
	GRPC, Raft, Gossip, HTTP string
	DataDir                  string
	Args                     []string // extra serve flags
	bin                      string
	t                        testing.TB
	mu                       sync.Mutex
	cmd                      *exec.Cmd
	done                     chan struct{}
	logPath                  string
}

// NewNode prepares (does not start) a node with fresh ports and data dir.
func NewNode(t testing.TB, bin, id string, extra ...string) *Node {
	t.Helper()
	ports, err := FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := &Node{
		ID:      id,
		GRPC:    fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Raft:    fmt.Sprintf("127.0.0.1:%d", ports[1]),
		Gossip:  fmt.Sprintf("127.0.0.1:%d", ports[2]),
		HTTP:    fmt.Sprintf("127.0.0.1:%d", ports[3]),
		DataDir: filepath.Join(dir, "data"),
		Args:    extra,
		bin:     bin,
		t:       t,
		logPath: filepath.Join(dir, id+".log"),
	}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("RAFTQ_TEST_DUMP") != "" {
			n.signal(syscall.SIGQUIT) // goroutine dump into the log
		}
		n.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(n.logPath); err == nil {
				t.Logf("---- log of %s (last 4 KiB) ----\n%s", n.ID, tail(string(b), 1<<20))
			}
		}
	})
	return n
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// Start launches the process.
func (n *Node) Start() {
	n.t.Helper()
	if err := n.Launch(); err != nil {
		n.t.Fatal(err)
	}
}

// Kill sends SIGKILL to the process group and waits for it to exit.
func (n *Node) Kill() { n.signal(syscall.SIGKILL) }

// Stop sends SIGTERM (graceful leave) and waits.
func (n *Node) Stop() { n.signal(syscall.SIGTERM) }

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Running reports whether the process is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Log returns what the process printed so far.
func (n *Node) Log() string {
	b, _ := os.ReadFile(n.logPath)
	return string(b)
}

// Dial connects a client to the given nodes.
func Dial(t testing.TB, nodes ...*Node) *client.Client {
	t.Helper()
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.GRPC)
	}
	var opts []client.Option
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

// WaitReady waits until a write through c succeeds-or-is-refused-cleanly:
// ListQueues answers, which needs a leader.
func WaitReady(ctx context.Context, c *client.Client) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.ListQueues(cctx, "")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Eventually polls cond until it returns nil or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("condition not met within %v: %v", timeout, err)
}

// JoinFlags returns --join and --bootstrap-expect for a cluster of nodes.
func JoinFlags(nodes []*Node) []string {
	var g []string
	for _, n := range nodes {
		g = append(g, n.Gossip)
	}
	return []string{"--join", strings.Join(g, ","), "--bootstrap-expect", fmt.Sprint(len(nodes))}
}
