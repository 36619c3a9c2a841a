//go:build linux

package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// requireNetAdmin skips the test, saying why, unless this process can
// build namespaces and firewall them: root, ip (iproute2), iptables.
func requireNetAdmin(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("chaos: SKIPPED — needs root (network namespaces, veth, iptables); run as root, e.g. `sudo make chaos`")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("chaos: SKIPPED — %q not found; install it (apt-get install -y iproute2 iptables, or `make chaos`, which does)", tool)
		}
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Skipf("chaos: SKIPPED — `ip netns` does not work here: %v: %s", err, out)
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// binary builds the raftq binary once per test process (with the race
// detector unless RAFTQ_TEST_NORACE is set, like the other black-box
// tests).
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "raftq-chaos-bin-")
		if binErr == nil {
			binPath, binErr = harness.Build(context.Background(), binDir, os.Getenv("RAFTQ_TEST_NORACE") == "")
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// live holds every cluster of this process, for the emergency teardown.
var live = struct {
	sync.Mutex
	clusters map[*Cluster]bool
}{clusters: map[*Cluster]bool{}}

func track(c *Cluster) {
	live.Lock()
	live.clusters[c] = true
	live.Unlock()
}

func untrack(c *Cluster) {
	live.Lock()
	delete(live.clusters, c)
	live.Unlock()
}

// teardownAll removes every live cluster: the path for a panic in a
// goroutine or an interrupt, where t.Cleanup would not run.
func teardownAll() {
	live.Lock()
	cs := live.clusters
	live.clusters = map[*Cluster]bool{}
	live.Unlock()
	for c := range cs {
		c.Close()
	}
}

func TestMain(m *testing.M) {
	// An interrupt (^C during `make chaos`) or a termination would leave
	// namespaces behind: tear down first. Nodes die with this process
	// anyway (Pdeathsig).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "chaos: %v: tearing down\n", s)
		teardownAll()
		os.Exit(2)
	}()
	code := m.Run()
	teardownAll()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// testLogger is a slog logger writing to t.Log until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	level := slog.LevelInfo
	if os.Getenv("RAFTQ_CHAOS_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type tWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

var _ io.Writer = (*tWriter)(nil)

// startCluster starts a cluster for t and removes it when t ends.
func startCluster(t *testing.T, log *slog.Logger, n int, onCrash func(NodeCrash)) *Cluster {
	t.Helper()
	// Making the namespaces is netlink work that waits on the kernel's
	// rtnl lock, which Docker's network set-up and teardown (the compose
	// test runs beside this one in make test) can hold for long on a
	// loaded machine: twice, under a load of 20, the 2 minutes this had
	// ran out before the network existed ("ip addr: context deadline
	// exceeded"). Forming the cluster keeps its own 90 s (WaitHealthy).
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, log, ClusterConfig{
		Bin: binary(t), Dir: t.TempDir(), Nodes: n, OnCrash: onCrash, OnPanic: teardownAll,
		// --pprof: a soak saves every node's heap profile at its end.
		Extra: []string{"--lease-grace", "2s", "--snapshot-threshold", "1024", "--trailing-logs", "512", "--pprof"},
	})
	if c != nil {
		track(c)
	}
	t.Cleanup(func() {
		if c == nil {
			return
		}
		if out := os.Getenv("RAFTQ_CHAOS_OUT"); out != "" && c.Net != nil {
			for _, nd := range c.Nodes {
				if b, err := os.ReadFile(nd.LogPath); err == nil {
					_ = os.WriteFile(filepath.Join(out, fmt.Sprintf("%s-%s.log", c.Net.Prefix, nd.ID)), b, 0o644)
				}
			}
		}
		if t.Failed() {
			for _, nd := range c.Nodes {
				t.Logf("---- log of %s (%s, last 16 KiB) ----\n%s", nd.ID, nd.LogPath, nd.LogTail(16<<10))
			}
		}
		c.Close()
		untrack(c)
		if c.Net == nil {
			return // the network was never made: nothing of it can be left
		}
		if left := waitNoLeftovers(context.Background(), c.Net.Prefix); len(left) > 0 {
			t.Errorf("left behind after teardown: %v", left)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitNoLeftovers waits (up to 10 s) for the kernel to finish removing
// what a network created; it returns what is still there at the deadline.
func waitNoLeftovers(ctx context.Context, prefix string) []string {
	var left []string
	_ = harness.WaitFor(ctx, 10*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		l, err := Leftovers(ctx, prefix+"-")
		if err == nil {
			var l2 []string
			if l2, err = Leftovers(ctx, prefix+"h"); err == nil {
				l = append(l, l2...)
			}
		}
		if err != nil {
			return err // keep what the last full listing found
		}
		if left = l; len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
	return left
}
