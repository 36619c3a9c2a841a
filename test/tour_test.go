package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// The README's quick start, tour and local-cluster blocks are a test:
// each is a ```sh block after an `<!-- tour: NAME -->` comment, and a
// `# → TEXT` line under a command is what that command prints (compared
// with runs of blanks collapsed, so column alignment does not matter).
// The commands run through sh in order, as a user in one terminal would:
// `export` lines carry over to the commands after them. What cannot run
// as written is mapped, and only that: `make run` starts `raftq serve`
// with no flags in the working dir, `make cluster` starts `raftq dev
// --nodes 3`, `make test` is this very run, and `kill -9 <leader pid>`
// kills the leader whose pid dev printed.

// tourCmd is one command of a README block and what it must print.
type tourCmd struct {
	line   string   // the command, its trailing comment removed
	expect []string // `# →` lines under it
}

var tourMarker = regexp.MustCompile(`^<!-- tour: ([a-z]+)\b.*-->$`)

// readmeTour parses README.md into its marked blocks.
func readmeTour(t *testing.T) map[string][]tourCmd {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]tourCmd{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		m := tourMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			t.Fatalf("README.md:%d: tour marker %q is not followed by a ```sh block", i+1, m[1])
		}
		var cmds []tourCmd
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			l := strings.TrimSpace(lines[i])
			switch {
			case strings.HasPrefix(l, "# →"):
				if len(cmds) == 0 {
					t.Fatalf("README.md:%d: `# →` before any command", i+1)
				}
				cmds[len(cmds)-1].expect = append(cmds[len(cmds)-1].expect, strings.TrimSpace(strings.TrimPrefix(l, "# →")))
			case l == "" || strings.HasPrefix(l, "#"):
			default:
				// A trailing comment starts at " # " (no command in these
				// blocks has a '#' of its own).
				if j := strings.Index(l, " #"); j >= 0 {
					l = strings.TrimSpace(l[:j])
				}
				cmds = append(cmds, tourCmd{line: l})
			}
		}
		blocks[m[1]] = cmds
	}
	for _, name := range []string{"quickstart", "tour", "cluster"} {
		if len(blocks[name]) == 0 {
			t.Fatalf("README.md has no `<!-- tour: %s -->` block with commands", name)
		}
	}
	return blocks
}

var blanks = regexp.MustCompile(`[ \t]+`)

func squash(s string) string { return blanks.ReplaceAllString(s, " ") }

// tourShell runs commands as one terminal would: in dir, with the
// exports seen so far.
type tourShell struct {
	t       *testing.T
	dir     string
	exports []string
}

// run runs line through sh and returns its combined output and exit code.
func (sh *tourShell) run(ctx context.Context, line string) (string, int) {
	sh.t.Helper()
	script := strings.Join(append(append([]string{}, sh.exports...), line), "\n")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "sh", "-c", script)
	cmd.Dir = sh.dir
	cmd.Env = append(os.Environ(), "HOME="+sh.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	default:
		sh.t.Fatalf("%s: %v", line, err)
		return "", -1
	}
}

// check runs c and fails unless it exits 0 and prints what the README says.
func (sh *tourShell) check(ctx context.Context, c tourCmd) {
	sh.t.Helper()
	if strings.HasPrefix(c.line, "export ") {
		sh.exports = append(sh.exports, c.line)
	}
	out, code := sh.run(ctx, c.line)
	if code != 0 {
		sh.t.Fatalf("$ %s\nexit %d:\n%s", c.line, code, out)
	}
	if miss := missing(out, c.expect); miss != "" {
		sh.t.Fatalf("$ %s\nREADME says it prints %q; it printed:\n%s", c.line, miss, out)
	}
	sh.t.Logf("$ %s: ok", c.line)
}

func missing(out string, expect []string) string {
	for _, e := range expect {
		if !strings.Contains(squash(out), squash(e)) {
			return e
		}
	}
	return ""
}

// portsFree skips the test when a default port the README uses is taken
// (another broker, or a parallel test, holds it): the README's commands
// use the defaults, so the test cannot move them.
func portsFree(t *testing.T, ports ...int) {
	t.Helper()
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Skipf("the README's default port %d is busy (%v); the tour needs it", p, err)
		}
		l.Close()
	}
}

// startTourProcess starts argv in dir and stops it (SIGINT, as Ctrl-C)
// at cleanup.
func startTourProcess(t *testing.T, name, dir string, argv ...string) *harness.Process {
	t.Helper()
	p, err := harness.StartProcess(harness.Command{Name: name, Argv: argv, Dir: dir, LogPath: filepath.Join(dir, name+".log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Signal(syscall.SIGINT, 30*time.Second); err != nil {
			t.Errorf("%v\n%s", err, p.LogTail(4000))
		}
	})
	return p
}

func TestREADMETour(t *testing.T) {
	blocks := readmeTour(t)
	portsFree(t, 7400, 7401, 7402, 7403)
	ctx := t.Context()

	// A fresh checkout after `make build`: ./bin/raftq, nothing on PATH.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(dir, "bin", "raftq")); err != nil {
		t.Fatal(err)
	}
	sh := &tourShell{t: t, dir: dir}
	if out, code := sh.run(ctx, "command -v raftq"); code == 0 {
		t.Skipf("a raftq is already on PATH (%s); the tour must find ./bin/raftq through its own export", strings.TrimSpace(out))
	}

	t.Run("quickstart", func(t *testing.T) {
		sh.t = t
		for _, c := range blocks["quickstart"] {
			switch c.line {
			case "make run":
				serve := startTourProcess(t, "serve", dir, filepath.Join(dir, "bin", "raftq"), "serve")
				waitShell(t, sh, serve, "./bin/raftq queue list")
				if _, err := os.Stat(filepath.Join(dir, "raftq-data")); err != nil {
					t.Fatalf("make run: README says data is in ./raftq-data: %v", err)
				}
			case "make test":
				// This test runs under it.
			default:
				t.Fatalf("quickstart: no mapping for %q", c.line)
			}
		}
		t.Run("tour", func(t *testing.T) {
			sh.t = t
			for _, c := range blocks["tour"] {
				sh.check(ctx, c)
			}
		})
	})
	if t.Failed() {
		return
	}
	// The single node stopped at the quickstart's cleanup, freeing 7400-7403.
	portsFree(t, 7400, 7401, 7402, 7403, 7410, 7411, 7412, 7413, 7420, 7421, 7422, 7423)
	t.Run("cluster", func(t *testing.T) {
		sh.t = t
		testTourCluster(t, sh, blocks["cluster"])
	})
}

// waitShell waits until line succeeds while p runs.
func waitShell(t *testing.T, sh *tourShell, p *harness.Process, line string) {
	t.Helper()
	err := harness.WaitFor(t.Context(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		if !p.Running() {
			return fmt.Errorf("%s exited", p.Name())
		}
		if out, code := sh.run(ctx, line); code != 0 {
			return fmt.Errorf("%s: exit %d: %s", line, code, out)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.LogTail(4000))
	}
}

var devPid = regexp.MustCompile(`(?m)^(n\d+): grpc .* pid (\d+) `)
var leaderLine = regexp.MustCompile(`(?m)^leader:\s+(n\d+) `)

func testTourCluster(t *testing.T, sh *tourShell, cmds []tourCmd) {
	ctx := t.Context()
	var dev *harness.Process
	pids := map[string]int{}
	killed := ""
	for _, c := range cmds {
		switch {
		case c.line == "make cluster":
			dev = startTourProcess(t, "dev", sh.dir, filepath.Join(sh.dir, "bin", "raftq"), "dev", "--nodes", "3")
			// dev prints each node's pid once all are started; then the
			// cluster is ready when a leader is known.
			logPath := filepath.Join(sh.dir, "dev.log")
			harness.Eventually(t, 60*time.Second, func() error {
				b, _ := os.ReadFile(logPath)
				if !strings.Contains(string(b), "Ctrl-C stops them all") {
					return errors.New("dev has not printed its nodes yet")
				}
				for _, m := range devPid.FindAllStringSubmatch(string(b), -1) {
					pids[m[1]], _ = strconv.Atoi(m[2])
				}
				return nil
			})
			if len(pids) != 3 {
				t.Fatalf("dev printed %d node pids, want 3:\n%s", len(pids), dev.LogTail(4000))
			}
			harness.Eventually(t, 60*time.Second, func() error {
				out, _ := sh.run(ctx, "raftq --addr 127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420 cluster status")
				if !leaderLine.MatchString(out) {
					return fmt.Errorf("no leader yet: %s", out)
				}
				return nil
			})
		case c.line == "kill -9 <leader pid>":
			out, _ := sh.run(ctx, "raftq --addr 127.0.0.1:7400,127.0.0.1:7410,127.0.0.1:7420 cluster status")
			m := leaderLine.FindStringSubmatch(out)
			if m == nil || pids[m[1]] == 0 {
				t.Fatalf("no leader pid to kill; status:\n%s", out)
			}
			killed = m[1]
			sh.check(ctx, tourCmd{line: "kill -9 " + strconv.Itoa(pids[killed])})
		case killed != "":
			// The README: until the killed node is back (dev restarts it
			// after 5 s) a command fails naming it; then it succeeds.
			harness.Eventually(t, 90*time.Second, func() error {
				out, code := sh.run(ctx, c.line)
				if code != 0 {
					if !strings.Contains(out, killed) {
						t.Fatalf("$ %s\nexit %d without naming the killed node %s:\n%s", c.line, code, killed, out)
					}
					return fmt.Errorf("exit %d: %s", code, out)
				}
				if miss := missing(out, c.expect); miss != "" {
					t.Fatalf("$ %s\nREADME says it prints %q; it printed:\n%s", c.line, miss, out)
				}
				return nil
			})
		default:
			sh.check(ctx, c)
		}
	}
	if dev == nil {
		t.Fatal("the cluster block has no `make cluster`")
	}
	if killed == "" {
		t.Fatal("the cluster block has no `kill -9 <leader pid>`")
	}
	// Ctrl-C stops every node dev started, the restarted one too.
	nodes, err := harness.Tree(dev.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) < 4 {
		t.Fatalf("dev runs %d processes, want itself and 3 nodes", len(nodes))
	}
	if err := dev.Signal(syscall.SIGINT, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, dev.LogTail(4000))
	}
	harness.Eventually(t, 30*time.Second, func() error {
		for _, pid := range nodes {
			if err := syscall.Kill(pid, 0); err == nil {
				return fmt.Errorf("pid %d still runs after dev exited", pid)
			}
		}
		return nil
	})
}
