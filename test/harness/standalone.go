package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// NewStandaloneNode prepares (does not start) a node outside a test, for
// programs such as the benchmark: fresh loopback ports, data and log under
// dir. Nothing cleans it up by itself: the caller must Kill or Stop it and
// remove dir. Start needs a test; use Launch.
func NewStandaloneNode(bin, id, dir string, extra ...string) (*Node, error) {
	ports, err := FreePorts(4)
	if err != nil {
		return nil, fmt.Errorf("harness: ports for %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	return &Node{
		ID:      id,
		GRPC:    fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Raft:    fmt.Sprintf("127.0.0.1:%d", ports[1]),
		Gossip:  fmt.Sprintf("127.0.0.1:%d", ports[2]),
		HTTP:    fmt.Sprintf("127.0.0.1:%d", ports[3]),
		DataDir: filepath.Join(dir, "data"),
		Args:    extra,
		bin:     bin,
		logPath: filepath.Join(dir, id+".log"),
	}, nil
}

// Launch starts the process in its own process group, returning an error
// where Start would fail the test.
func (n *Node) Launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("harness: node %s already running", n.ID)
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	args := append([]string{"serve",
		"--node-id", n.ID, "--data-dir", n.DataDir,
		"--grpc-addr", n.GRPC, "--raft-addr", n.Raft, "--gossip-addr", n.Gossip, "--http-addr", n.HTTP,
	}, n.Args...)
	cmd := exec.Command(n.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: if the test process dies abruptly (a -timeout panic, a
	// kill), its nodes die with it instead of lingering.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("harness: start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	return nil
}

// ErrNotRunning is returned by Pid for a node that is not running.
var ErrNotRunning = errors.New("harness: node not running")

// Pid returns the process id of the running node.
func (n *Node) Pid() (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0, ErrNotRunning
	}
	return n.cmd.Process.Pid, nil
}
