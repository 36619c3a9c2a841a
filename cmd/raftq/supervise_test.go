package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is an io.Writer safe for the supervisor's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls out until re matches, up to a deadline.
func waitFor(t *testing.T, out *syncBuffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in output:\n%s", re, out.String())
		}
		// No event marks a line written by another goroutine.
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// raftq dev's supervisor restarts a node killed with -9 after
// --restart-after, says so, and stop ends the restarted process too.
func TestSupervisorRestartsAndStopsEverything(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	out := &syncBuffer{}
	sup := newSupervisor(out, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := filepath.Join(t.TempDir(), "n1.log")
	first, err := sup.start(ctx, "n1", sleep, []string{"600"}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, regexp.MustCompile(fmt.Sprintf(`n1 \(pid %d\) signal: killed; restarting it in 10ms`, first)))
	m := waitFor(t, out, regexp.MustCompile(`n1 restarted: pid (\d+)`))
	second, _ := strconv.Atoi(m[1])
	if second == first || !alive(second) {
		t.Fatalf("restarted pid %d (first %d) not running", second, first)
	}
	cancel()
	sup.stop()
	if alive(second) {
		// stop waited for it: a process still there is a zombie at worst,
		// which kill(0) also reports; check it was reaped.
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(second, &ws, syscall.WNOHANG, nil); pid == 0 {
			t.Fatalf("restarted node %d still running after stop", second)
		}
	}
}

// With --restart-after 0 a dead node stays down and the output says how
// to start it.
func TestSupervisorNoRestart(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	out := &syncBuffer{}
	sup := newSupervisor(out, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid, err := sup.start(ctx, "n2", sleep, []string{"600"}, filepath.Join(t.TempDir(), "n2.log"))
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, out, regexp.MustCompile(`n2 \(pid \d+\) signal: killed; not restarting it \(--restart-after 0\)\. Start it again with:\n  \S*sleep 600`))
	cancel()
	sup.stop()
}
