// Package systems starts the brokers the benchmark compares — raftq, NATS
// JetStream and RabbitMQ quorum queues, each as real processes on loopback
// — and drives them through workload.Driver. Every process it starts runs
// in its own process group and is killed, with its temp dir removed, by
// the Close of what started it.
package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftq/raftq/test/bench/workload"
)

// process is one server process this package started.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	mu      sync.Mutex
	exited  bool
}

// startProcess runs argv with env added to the environment, output to
// logPath, in a new process group.
func startProcess(name, logPath string, env []string, argv ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exited = true
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited
}

// kill sends SIGKILL to the process group and to every descendant that
// left it (Erlang's helpers start sessions of their own), then waits.
func (p *process) kill() {
	if !p.running() {
		return
	}
	pids, _ := workload.Tree(p.pid())
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	for _, d := range pids[1:] {
		_ = syscall.Kill(d, syscall.SIGKILL)
	}
	until := time.Now().Add(10 * time.Second)
	select {
	case <-p.done:
	case <-time.After(time.Until(until)):
	}
	// Descendants outside the group (beam.smp's helpers) exit on their
	// own schedule; wait until none is left alive.
	for _, d := range pids[1:] {
		for alive(d) && time.Now().Before(until) {
			time.Sleep(10 * time.Millisecond) // no event tells another process's exit
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// logTail returns the end of the process's output, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// freePorts reserves n distinct loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// poll calls f every interval until it returns nil, or returns its last
// error (wrapped) when ctx ends or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = f(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %v: %w", what, timeout, errors.Join(last, ctx.Err()))
		case <-time.After(interval):
		}
	}
}

// dirSize is the total size of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// System is a running broker deployment: the workload target and how to
// take it down.
type System struct {
	workload.Target
	close func()
}

// Close stops every process of the system and removes its files.
func (s *System) Close() {
	if s.close != nil {
		s.close()
	}
}

// Starter starts one kind of system; Name is what -systems selects.
type Starter struct {
	Name  string
	Start func(ctx context.Context, log *slog.Logger) (*System, error)
}
