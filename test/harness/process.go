package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Command says what process to start.
type Command struct {
	Name    string   // for logs and errors
	Argv    []string // the program and its arguments
	Env     []string // added to this process's environment
	Dir     string   // working directory; empty is the caller's
	LogPath string   // stdout and stderr are appended here
	// OnExit, if set, is called (on a goroutine of its own, after Done is
	// closed) when the process exits without Kill, Stop or Signal having
	// asked it to: a crash. err is what exec.Cmd.Wait returned.
	OnExit func(err error)
}

// Process is one child process in a process group of its own, so that a
// signal reaches it and whatever it forks, and nothing else. It dies with
// the process that started it (Pdeathsig), so a test binary killed by
// -timeout leaves nothing behind.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	onExit  func(error)

	mu       sync.Mutex
	exited   bool
	expected bool // the coming exit was asked for
	paused   bool
}

// StartProcess starts c. A banner line with the time goes to the log
// first, so restarts are visible in it.
func StartProcess(c Command) (*Process, error) {
	if len(c.Argv) == 0 {
		return nil, fmt.Errorf("harness: %s: no program", c.Name)
	}
	logf, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: %s: %w", c.Name, err)
	}
	fmt.Fprintf(logf, "---- harness: start %s at %s ----\n", c.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("harness: start %s: %w", c.Name, err)
	}
	p := &Process{name: c.Name, logPath: c.LogPath, cmd: cmd, done: make(chan struct{}), onExit: c.OnExit}
	go p.wait(logf)
	return p, nil
}

func (p *Process) wait(logf *os.File) {
	err := p.cmd.Wait()
	logf.Close()
	p.mu.Lock()
	p.exited, p.paused = true, false
	expected := p.expected
	p.mu.Unlock()
	close(p.done)
	if !expected && p.onExit != nil {
		p.onExit(err)
	}
}

// Name is the Command's name.
func (p *Process) Name() string { return p.name }

// Pid is the process id (also its process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited (paused counts as
// running).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited
}

// Paused reports whether the process is stopped by Pause.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Pause stops the process group (SIGSTOP).
func (p *Process) Pause() error { return p.pauseResume(true) }

// Resume continues a paused process group (SIGCONT).
func (p *Process) Resume() error { return p.pauseResume(false) }

func (p *Process) pauseResume(pause bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return fmt.Errorf("harness: %s is not running", p.name)
	}
	sig := syscall.SIGCONT
	if pause {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil {
		return fmt.Errorf("harness: %s: %w", p.name, err)
	}
	p.paused = pause
	return nil
}

// Kill is kill -9: SIGKILL to the process group and to every descendant
// that left it (RabbitMQ's Erlang helpers start sessions of their own);
// it returns once the process has exited and its descendants are gone
// (or, for descendants, after 10 s).
func (p *Process) Kill() { _ = p.Signal(syscall.SIGKILL, 0) }

// Stop asks the process to exit (SIGTERM: a raftq node leaves the
// cluster gracefully) and waits up to timeout; past it the process is
// killed and Stop says so.
func (p *Process) Stop(timeout time.Duration) error { return p.Signal(syscall.SIGTERM, timeout) }

// Signal sends sig to the process group (continuing it if paused, so it
// can act on sig) and waits up to timeout for the exit; past it the
// process is killed, and Signal says so. SIGKILL waits for the exit, with
// no timeout.
func (p *Process) Signal(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return nil
	}
	p.expected = true
	paused := p.paused
	p.mu.Unlock()
	if sig == syscall.SIGKILL {
		p.kill()
		return nil
	}
	_ = syscall.Kill(-p.Pid(), sig)
	if paused {
		_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	p.kill()
	return fmt.Errorf("harness: %s did not exit within %v of %v; killed", p.name, timeout, sig)
}

func (p *Process) kill() {
	pids, _ := Tree(p.Pid()) // before the kill: orphans are reparented
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	for _, d := range pids[min(1, len(pids)):] {
		_ = syscall.Kill(d, syscall.SIGKILL)
	}
	<-p.done
	if len(pids) < 2 {
		return
	}
	// Descendants outside the group exit on their own schedule, and no
	// event tells another process's exit: poll /proc.
	_ = WaitFor(context.Background(), 10*time.Second, 10*time.Millisecond, func(context.Context) error {
		for _, d := range pids[1:] {
			if alive(d) {
				return fmt.Errorf("pid %d alive", d)
			}
		}
		return nil
	})
}

// LogTail is the end (at most n bytes) of what the process printed, for
// error messages.
func (p *Process) LogTail(n int) string { return logTail(p.logPath, n) }

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// ErrNotRunning is returned for a node or process that is not running.
var ErrNotRunning = errors.New("harness: not running")
