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

	wg    sync.WaitGroup
	mu    sync.Mutex
	outMu sync.Mutex
	procs map[string]*exec.Cmd // the current process of each node
	// exited has a channel for every process started, closed once it
	// has exited.
	exited  map[*exec.Cmd]chan struct{}
	stopped bool
}

func newSupervisor(out io.Writer, restartAfter time.Duration) *supervisor {
	return &supervisor{out: out, restartAfter: restartAfter, procs: map[string]*exec.Cmd{}, exited: map[*exec.Cmd]chan struct{}{}}
}

func (s *supervisor) printf(format string, args ...any) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintf(s.out, format, args...)
}

// launch starts one process of node id, its output appended to logPath;
// from is where this process's output starts in it.
func (s *supervisor) launch(id, self string, args []string, logPath string) (_ *exec.Cmd, _ *os.File, from int64, _ error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, 0, err
	}
	if st, err := logf.Stat(); err == nil {
		from = st.Size()
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
		return nil, nil, 0, context.Canceled
	}
	if err := c.Start(); err != nil {
		logf.Close()
		return nil, nil, 0, err
	}
	s.procs[id] = c
	s.exited[c] = make(chan struct{})
	return c, logf, from, nil
}

// pid returns the pid of node id's current process (0 if none).
func (s *supervisor) pid(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.procs[id]; ok && c.Process != nil {
		return c.Process.Pid
	}
	return 0
}

// failureLines is how much of a dead node's log dev prints.
const failureLines = 8

// logTailFrom returns the last n lines written to path from offset on,
// each indented: why a node died (the log is in a dir dev may delete).
func logTailFrom(path string, offset int64, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b[offset:]), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var out strings.Builder
	for _, l := range lines {
		if l != "" {
			out.WriteString("    | " + l + "\n")
		}
	}
	return out.String()
}

// start launches node id and watches it until ctx ends; it returns the
// first process's pid.
func (s *supervisor) start(ctx context.Context, id, self string, args []string, logPath string) (int, error) {
	c, logf, from, err := s.launch(id, self, args, logPath)
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
			s.mu.Lock()
			close(s.exited[c])
			s.mu.Unlock()
			if ctx.Err() != nil || s.isStopped() {
				return
			}
			how := "exited"
			if err != nil {
				how = err.Error()
			}
			// The reason is in its log: say it here.
			if tail := logTailFrom(logPath, from, failureLines); tail != "" {
				how += "; the end of its log (" + logPath + "):\n" + tail
			} else {
				how += " (nothing in its log " + logPath + ")\n"
			}
			if s.restartAfter <= 0 {
				s.printf("%s (pid %d) %s  not restarting it (--restart-after 0). Start it again with:\n  %s %s\n",
					id, c.Process.Pid, how, self, strings.Join(args, " "))
				return
			}
			s.printf("%s (pid %d) %s  restarting it in %s (--restart-after; 0 disables)\n", id, c.Process.Pid, how, s.restartAfter)
			t := time.NewTimer(s.restartAfter)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if c, logf, from, err = s.launch(id, self, args, logPath); err != nil {
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
// SIGTERM, and SIGKILL if it has not exited within 20 s. The node last
// (if any; the leader) is signalled only once the others have exited: a
// leader stopped with its followers hands leadership to one of them,
// which is stopping too, and waits for a new leader until its share of
// --shutdown-timeout has passed (6 of the default 8 s); with its followers
// gone it stops at once.
func (s *supervisor) stop(last string) {
	s.mu.Lock()
	s.stopped = true
	var first, then []*exec.Cmd
	for id, c := range s.procs {
		if id == last {
			then = append(then, c)
		} else {
			first = append(first, c)
		}
	}
	exited := map[*exec.Cmd]chan struct{}{}
	for _, c := range append(first, then...) {
		exited[c] = s.exited[c]
	}
	s.mu.Unlock()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	killed := false
	for _, procs := range [][]*exec.Cmd{first, then} {
		for _, c := range procs {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		}
		for _, c := range procs {
			if killed {
				break
			}
			select {
			case <-exited[c]:
			case <-deadline.C:
				killed = true
			}
		}
		if killed {
			for _, c := range append(first, then...) {
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
			break
		}
	}
	s.wg.Wait()
}
