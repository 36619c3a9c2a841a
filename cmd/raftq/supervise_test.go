package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	waitFor(t, out, regexp.MustCompile(fmt.Sprintf(`n1 \(pid %d\) signal: killed \(nothing in its log \S+\)\n  restarting it in 10ms`, first)))
	m := waitFor(t, out, regexp.MustCompile(`n1 restarted: pid (\d+)`))
	second, _ := strconv.Atoi(m[1])
	if second == first || !alive(second) {
		t.Fatalf("restarted pid %d (first %d) not running", second, first)
	}
	cancel()
	sup.stop("")
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
	waitFor(t, out, regexp.MustCompile(`n2 \(pid \d+\) signal: killed \(nothing in its log \S+\)\n  not restarting it \(--restart-after 0\)\. Start it again with:\n  \S*sleep 600`))
	cancel()
	sup.stop("")
}

// A node that dies is reported with the end of what it logged (its log
// is in dev's data dir, which dev deletes on exit), not only with its
// exit status; earlier runs' lines in the same log are not repeated.
func TestSupervisorPrintsFailureReason(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	log := filepath.Join(t.TempDir(), "n1.log")
	if err := os.WriteFile(log, []byte("an earlier run's line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	sup := newSupervisor(out, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	script := `echo starting; echo "Error: --grpc-addr: listen tcp 127.0.0.1:7400: bind: address already in use" >&2; exit 1`
	if _, err := sup.start(ctx, "n1", sh, []string{"-c", script}, log); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, regexp.MustCompile(`n1 \(pid \d+\) exit status 1; the end of its log \(\S+\):\n    \| starting\n    \| Error: --grpc-addr: listen tcp 127.0.0.1:7400: bind: address already in use\n  not restarting it`))
	if strings.Contains(out.String(), "earlier run") {
		t.Fatalf("printed an earlier run's log:\n%s", out.String())
	}
	cancel()
	sup.stop("")
}

// stop signals the node named last (dev's leader) only once every other
// node has exited: a leader stopped together with its followers hands
// leadership to one that is stopping too and waits seconds for a new
// leader.
func TestSupervisorStopsTheLeaderLast(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	order := filepath.Join(dir, "order")
	out := &syncBuffer{}
	sup := newSupervisor(out, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"n1", "n2", "n3"} {
		// Each records when it is told to stop, then exits.
		script := fmt.Sprintf(`trap 'echo %s >> %s; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, id, order)
		if _, err := sup.start(ctx, id, sh, []string{"-c", script}, filepath.Join(dir, id+".log")); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		// The trap is set once it printed ready.
		for deadline := time.Now().Add(30 * time.Second); ; {
			if b, _ := os.ReadFile(filepath.Join(dir, id+".log")); strings.Contains(string(b), "ready") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never started", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	sup.stop("n2")
	b, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	if len(got) != 3 || got[2] != "n2" {
		t.Fatalf("stopped in the order %v, want n2 (the leader) last", got)
	}
}
