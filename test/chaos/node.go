//go:build linux

package chaos

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Every node has an address of its own, so all use the same ports.
const (
	grpcPort   = 7400
	raftPort   = 7401
	gossipPort = 7402
	httpPort   = 7403
)

// Node is one raftq process running inside its host's namespace, started
// as `ip netns exec <ns> raftq serve ...` (ip execs the binary, so the
// process and its group are the node's own).
type Node struct {
	ID      string
	Host    *Host
	GRPC    string
	DataDir string
	LogPath string
	args    []string
	bin     string
	log     *slog.Logger
	// onCrash is called when the process exits without being told to.
	onCrash func(NodeCrash)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	expected bool // the coming exit was asked for
	paused   bool
}

func newNode(bin, dir string, h *Host, join []string, n int, extra []string, log *slog.Logger, onCrash func(NodeCrash)) *Node {
	id := fmt.Sprintf("n%d", h.Index+1)
	addr := func(port int) string { return net.JoinHostPort(h.IP, strconv.Itoa(port)) }
	nd := &Node{
		ID: id, Host: h, GRPC: addr(grpcPort),
		DataDir: filepath.Join(dir, id, "data"),
		LogPath: filepath.Join(dir, id+".log"),
		bin:     bin, log: log.With("node", id), onCrash: onCrash,
	}
	nd.args = append([]string{"serve",
		"--node-id", id, "--data-dir", nd.DataDir,
		"--grpc-addr", nd.GRPC, "--raft-addr", addr(raftPort), "--gossip-addr", addr(gossipPort), "--http-addr", addr(httpPort),
		"--bootstrap-expect", strconv.Itoa(n),
	}, extra...)
	for _, j := range join {
		nd.args = append(nd.args, "--join", j)
	}
	return nd
}

// Start launches the process (a no-op if it runs).
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(n.DataDir), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "---- chaos: start %s at %s ----\n", n.ID, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Host.NS, n.bin}, n.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=0")
	// Its own group (signals reach only the node); killed if the test
	// process dies, so no node outlives a crashed run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	n.cmd, n.done, n.expected, n.paused = cmd, done, false, false
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		expected := n.expected
		if n.cmd == cmd {
			n.cmd = nil
		}
		n.mu.Unlock()
		close(done)
		if !expected {
			status := "exited"
			if err != nil {
				status = err.Error()
			}
			n.log.Error("node exited on its own", "status", status)
			b, _ := os.ReadFile(n.LogPath)
			n.onCrash(NodeCrash{Node: n.ID, At: time.Now(), Status: status, Log: tail(string(b), 8<<10)})
		}
	}()
	return nil
}

// Kill sends SIGKILL to the node's group and waits for it to exit.
func (n *Node) Kill() { n.stop(syscall.SIGKILL, 0) }

// Stop sends SIGTERM (a graceful leave) and waits up to timeout before
// killing it.
func (n *Node) Stop(timeout time.Duration) { n.stop(syscall.SIGTERM, timeout) }

func (n *Node) stop(sig syscall.Signal, timeout time.Duration) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.expected = true
	paused := n.paused
	n.paused = false
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	pg := -cmd.Process.Pid
	_ = syscall.Kill(pg, sig)
	if paused {
		_ = syscall.Kill(pg, syscall.SIGCONT)
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-done:
	case <-time.After(timeout):
		n.log.Warn("node did not stop; killing", "signal", sig.String())
		_ = syscall.Kill(pg, syscall.SIGKILL)
		<-done
	}
}

// Pause stops the node's group (SIGSTOP); Resume continues it.
func (n *Node) Pause() error { return n.pauseResume(true) }

// Resume continues a paused node (SIGCONT).
func (n *Node) Resume() error { return n.pauseResume(false) }

func (n *Node) pauseResume(pause bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("node %s is not running", n.ID)
	}
	sig := syscall.SIGCONT
	if pause {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(-n.cmd.Process.Pid, sig); err != nil {
		return err
	}
	n.paused = pause
	return nil
}

// Running reports whether the process is up (paused counts as up).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Paused reports whether the node is stopped by SIGSTOP.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
