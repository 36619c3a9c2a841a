package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestFreePortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	ports, err := FreePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if p < portsLow || p >= ephemeralLow() {
			t.Fatalf("port %d outside [%d, %d)", p, portsLow, ephemeralLow())
		}
		// Closed before returning: the node can bind both protocols.
		tl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("tcp %d: %v", p, err)
		}
		ul, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		tl.Close()
		if err != nil {
			t.Fatalf("udp %d: %v", p, err)
		}
		ul.Close()
	}
}

func TestWaitFor(t *testing.T) {
	errNotYet := errors.New("not yet")
	cases := []struct {
		name     string
		okAt     int // cond succeeds from this call on; 0: never
		cancelAt int // the caller's context is cancelled at this call; 0: never
		wantErr  error
		calls    int
		took     time.Duration
	}{
		{name: "at once", okAt: 1, calls: 1, took: 0},
		{name: "third call", okAt: 3, calls: 3, took: 200 * time.Millisecond},
		{name: "timeout", wantErr: context.DeadlineExceeded, calls: 11, took: time.Second},
		{name: "cancelled", cancelAt: 2, wantErr: context.Canceled, calls: 2, took: 100 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				start, calls := time.Now(), 0
				err := WaitFor(ctx, time.Second, 100*time.Millisecond, func(ctx context.Context) error {
					calls++
					if calls == tc.cancelAt {
						cancel()
					}
					if tc.okAt > 0 && calls >= tc.okAt {
						return nil
					}
					return errNotYet
				})
				if tc.wantErr == nil && err != nil {
					t.Fatal(err)
				}
				if tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !errors.Is(err, errNotYet)) {
					t.Fatalf("err %v, want it to wrap %v and the condition's last error", err, tc.wantErr)
				}
				if calls != tc.calls || time.Since(start) != tc.took {
					t.Fatalf("%d calls in %v, want %d in %v", calls, time.Since(start), tc.calls, tc.took)
				}
			})
		})
	}
}

func TestHoldsSaysWhatIsAwaited(t *testing.T) {
	ok := false
	cond := Holds("the flag", func() bool { return ok })
	if err := cond(); err == nil || !strings.Contains(err.Error(), "the flag") {
		t.Fatalf("false condition: %v, want an error naming what is awaited", err)
	}
	ok = true
	if err := cond(); err != nil {
		t.Fatalf("true condition: %v", err)
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), time.Second); err != nil || time.Since(start) != time.Second {
			t.Fatalf("Sleep: %v after %v", err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("Sleep past the context: %v after %v", err, time.Since(start))
		}
		if err := Sleep(ctx, 0); err == nil {
			t.Fatal("Sleep(0) on an ended context says the time passed")
		}
	})
}

func TestTreeHasChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pids, err := Tree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if pids[0] != os.Getpid() || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("tree %v lacks the child %d", pids, cmd.Process.Pid)
	}
}

// shell starts sh -c script as a Process logging into a temp dir.
func shell(t *testing.T, script string, onExit func(error)) *Process {
	t.Helper()
	p, err := StartProcess(Command{Name: "sh", Argv: []string{"sh", "-c", script}, Env: []string{"HARNESS_TEST=yes"},
		LogPath: filepath.Join(t.TempDir(), "sh.log"), OnExit: onExit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestProcessKillPauseResume(t *testing.T) {
	crashed := make(chan error, 1)
	p := shell(t, "exec sleep 30", func(err error) { crashed <- err }) // one process: no vfork parent to be caught in state D
	if !p.Running() || p.Paused() || p.Pid() <= 0 {
		t.Fatalf("running %v paused %v pid %d", p.Running(), p.Paused(), p.Pid())
	}
	if err := p.Pause(); err != nil || !p.Paused() {
		t.Fatalf("pause: %v, paused %v", err, p.Paused())
	}
	// The signal is delivered asynchronously.
	if err := WaitFor(context.Background(), 10*time.Second, time.Millisecond, func(context.Context) error {
		if state, _, _ := stat(p.Pid()); state != "T" {
			return fmt.Errorf("state %q after SIGSTOP", state)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil || p.Paused() {
		t.Fatalf("resume: %v, paused %v", err, p.Paused())
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	p.Kill() // a paused process dies too
	select {
	case <-p.Done():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if p.Running() || p.Paused() {
		t.Fatal("killed process still running")
	}
	if err := p.Pause(); err == nil {
		t.Fatal("paused a process that exited")
	}
	select {
	case err := <-crashed:
		t.Fatalf("a kill was reported as a crash: %v", err)
	default:
	}
	p.Kill() // again: a no-op
}

func TestProcessExitOnItsOwnIsReported(t *testing.T) {
	crashed := make(chan error, 1)
	p := shell(t, `echo "said $HARNESS_TEST"; exit 3`, func(err error) { crashed <- err })
	select {
	case err := <-crashed:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("exit reported as %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no crash report")
	}
	if p.Running() {
		t.Fatal("exited process running")
	}
	if log := p.LogTail(1000); !strings.Contains(log, "---- harness: start sh") || !strings.HasSuffix(log, "said yes") {
		t.Fatalf("log %q", log)
	}
	if got := p.LogTail(3); got != "yes" {
		t.Fatalf("LogTail(3) = %q", got)
	}
}

func TestProcessStopKillsWhatIgnoresTERM(t *testing.T) {
	// The trap is set before "ready" is printed, so the signal cannot
	// arrive before it.
	p := shell(t, `trap "" TERM; echo ready; while :; do sleep 1; done`, nil)
	if err := WaitFor(context.Background(), 30*time.Second, 10*time.Millisecond, func(context.Context) error {
		if !strings.HasSuffix(p.LogTail(100), "ready") {
			return errors.New("not ready")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := p.Stop(300 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "killed") || p.Running() {
		t.Fatalf("Stop: %v, running %v", err, p.Running())
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("killed after %v, before the timeout", el)
	}
	q := shell(t, "sleep 30", nil)
	if err := q.Stop(StopTimeout); err != nil || q.Running() {
		t.Fatalf("Stop of a process that obeys TERM: %v", err)
	}
}

func TestKillReachesDescendantsOutsideTheGroup(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid:", err)
	}
	p := shell(t, `setsid sleep 30 & echo "child $!"; wait`, nil)
	var child int
	if err := WaitFor(context.Background(), 30*time.Second, 10*time.Millisecond, func(context.Context) error {
		_, s, ok := strings.Cut(p.LogTail(100), "child ")
		if !ok {
			return errors.New("no child yet")
		}
		var err error
		child, err = strconv.Atoi(s)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	// setsid(1) leaves the group a moment after the shell printed its pid.
	if err := WaitFor(context.Background(), 30*time.Second, time.Millisecond, func(context.Context) error {
		if pgid, err := syscall.Getpgid(child); err != nil || pgid == p.Pid() {
			return fmt.Errorf("child %d in group %d (%v)", child, pgid, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if alive(child) {
		t.Fatalf("descendant %d outside the group survived Kill", child)
	}
}

func TestNodeLaunchKillRestart(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-raftq")
	// A stand-in for raftq that prints its arguments and waits.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"args: $*\"\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(NodeConfig{ID: "n7", Bin: bin, Dir: filepath.Join(dir, "n7"), Args: []string{"--lease-grace", "2s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Kill)
	for _, a := range []string{n.GRPC, n.Raft, n.Gossip, n.HTTP} {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("address %q", a)
		}
	}
	if _, err := n.Pid(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Pid before start: %v", err)
	}
	if err := n.Launch(); err != nil {
		t.Fatal(err)
	}
	if err := n.Launch(); err == nil {
		t.Fatal("launched a running node twice")
	}
	want := fmt.Sprintf("args: serve --node-id n7 --data-dir %s --grpc-addr %s --raft-addr %s --gossip-addr %s --http-addr %s --lease-grace 2s",
		filepath.Join(dir, "n7", "data"), n.GRPC, n.Raft, n.Gossip, n.HTTP)
	if err := WaitFor(context.Background(), 30*time.Second, 10*time.Millisecond, func(context.Context) error {
		if !strings.Contains(n.Log(), want) {
			return fmt.Errorf("log %q", n.Log())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n.Kill()
	if n.Running() {
		t.Fatal("running after Kill")
	}
	if err := n.Launch(); err != nil { // a restart: same ports and data dir
		t.Fatal(err)
	}
	if pid, err := n.Pid(); err != nil || pid <= 0 || !n.Running() {
		t.Fatalf("after restart: pid %d, %v", pid, err)
	}
	if got := strings.Count(n.Log(), "---- harness: start n7"); got != 2 {
		t.Fatalf("%d start banners in the log, want 2", got)
	}
	if err := n.Stop(StopTimeout); err != nil || n.Running() {
		t.Fatalf("Stop: %v", err)
	}
}

// TestFreePortsNeverRepeatWithinAProcess: every node prepares its ports
// with its own FreePorts call, and none is bound until the cluster starts,
// so a later call must not hand out a port an earlier one did. Without
// that, a 3-node cluster drew the same port twice about once in 250
// starts (a fresh-clone make test failed: n2's --grpc-addr was n3's Raft
// port, "bind: address already in use"). 700 calls of 4 ports among the
// 12,000 in the range repeat one almost surely if nothing prevents it.
func TestFreePortsNeverRepeatWithinAProcess(t *testing.T) {
	seen := map[int]int{}
	for call := range 700 {
		ports, err := FreePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if first, ok := seen[p]; ok {
				t.Fatalf("port %d handed out by call %d and again by call %d", p, first, call)
			}
			seen[p] = call
		}
	}
}

// TestFreePortsReservedAcrossProcesses: a port FreePorts handed out stays
// reserved for other test binaries until this process exits. go test runs
// packages in parallel, each probing ports it binds only later; without a
// reservation two of them could pick the same one in that window (a
// fresh-clone make test: TestCluster's fifth node, "bind: address already
// in use"). The child is flock(1), as another process would be.
func TestFreePortsReservedAcrossProcesses(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) is not installed (util-linux)")
	}
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		file := filepath.Join(os.TempDir(), "raftq-test-ports", strconv.Itoa(p))
		out, err := exec.Command(flock, "--nonblock", "--conflict-exit-code", "75", file, "true").CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 75 {
			t.Fatalf("port %d: another process could lock %s (err %v, %s)", p, file, err, out)
		}
	}
}

// TestWaitForReportsTheLastCompleteAttempt: an attempt the deadline cut
// short fails for that reason alone (every call it makes ends with
// DeadlineExceeded), which says nothing of why the wait failed; the error
// keeps the attempt before it, which ran to its end.
func TestWaitForReportsTheLastCompleteAttempt(t *testing.T) {
	errReal := errors.New("4 healthy voters of 5")
	synctest.Test(t, func(t *testing.T) {
		err := WaitFor(context.Background(), time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			// Each attempt takes 300 ms; the fourth is cut short at 1 s.
			select {
			case <-time.After(300 * time.Millisecond):
				return errReal
			case <-ctx.Done():
				return fmt.Errorf("status: %w", ctx.Err())
			}
		})
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errReal) {
			t.Fatalf("err %v, want it to wrap the deadline and the last complete attempt's error", err)
		}
	})
}
