package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisor runs raftq dev's node processes: it restarts one that dies
// (after restartAfter; 0 = never) and stops every process it started,
// restarted ones included.
type supervisor struct {
	out          io.Writer
	restartAfter time.Duration

	wg      sync.WaitGroup
	mu      sync.Mutex
	outMu   sync.Mutex
	procs   map[string]*exec.Cmd // the current process of each node
	stopped bool
}

func newSupervisor(out io.Writer, restartAfter time.Duration) *supervisor {
	return &supervisor{out: out, restartAfter: restartAfter, procs: map[string]*exec.Cmd{}}
}

func (s *supervisor) printf(format string, args ...any) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintf(s.out, format, args...)
}

// launch starts one process of node id, its output appended to logPath.
func (s *supervisor) launch(id, self string, args []string, logPath string) (*exec.Cmd, *os.File, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	c := exec.Command(self, args...)
	c.Stdout, c.Stderr = logf, logf
	// Its own process group: a Ctrl-C in dev's terminal reaches dev,
	// which stops the nodes in order, not every node at once.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		logf.Close()
		return nil, nil, context.Canceled
	}
	if err := c.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	s.procs[id] = c
	return c, logf, nil
}

// start launches node id and watches it until ctx ends; it returns the
// first process's pid.
func (s *supervisor) start(ctx context.Context, id, self string, args []string, logPath string) (int, error) {
	c, logf, err := s.launch(id, self, args, logPath)
	if err != nil {
		return 0, err
	}
	pid := c.Process.Pid
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			err := c.Wait()
			logf.Close()
			if ctx.Err() != nil || s.isStopped() {
				return
			}
			how := "exited"
			if err != nil {
				how = err.Error()
			}
			if s.restartAfter <= 0 {
				s.printf("%s (pid %d) %s; not restarting it (--restart-after 0). Start it again with:\n  %s %s\n",
					id, c.Process.Pid, how, self, strings.Join(args, " "))
				return
			}
			s.printf("%s (pid %d) %s; restarting it in %s (--restart-after; 0 disables)\n", id, c.Process.Pid, how, s.restartAfter)
			t := time.NewTimer(s.restartAfter)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if c, logf, err = s.launch(id, self, args, logPath); err != nil {
				if !s.isStopped() {
					s.printf("%s: restart failed: %v\n", id, err)
				}
				return
			}
			s.printf("%s restarted: pid %d\n", id, c.Process.Pid)
		}
	}()
	return pid, nil
}

func (s *supervisor) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// stop ends supervision: no more restarts; every running process gets
// SIGTERM, and SIGKILL if it has not exited within 20 s.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	var procs []*exec.Cmd
	for _, c := range s.procs {
		procs = append(procs, c)
	}
	s.mu.Unlock()
	for _, c := range procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		for _, c := range procs {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
		<-done
	}
}
