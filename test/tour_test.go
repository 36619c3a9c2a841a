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

// The README's marked blocks are a test: each is a ```sh block after an
// `<!-- tour: NAME -->` comment, and a `# → TEXT` line under a command is
// a line that command prints, exactly (alignment included), where `…`
// stands for what differs from run to run (ids, times); the `# →` lines
// of a command must appear in its output in their order. The commands run
// through sh in order, as a user in one terminal would: `export` lines
// carry over to the commands after them, and a line ending in `\` goes on
// on the next. What cannot run as written is mapped, and only that: `make
// run` starts `raftq serve` with no flags in the working dir, `make
// cluster` starts `raftq dev --nodes 3`, `make test` is this very run,
// `kill -9 <leader pid>` kills the leader whose pid dev printed, and the
// TLS blocks' machines 10.0.0.1-3 are the loopback addresses 127.0.0.1-3
// (the serve block, "n1 shown", runs once per node, in a directory of its
// own holding the files the README says to copy there).

// tourCmd is one command of a README block and what it must print.
type tourCmd struct {
	line   string   // the command, its trailing comment removed
	expect []string // `# →` lines under it
}

var tourMarker = regexp.MustCompile(`^<!-- tour: ([a-z]+)\b.*-->$`)

// readmeTour parses README.md into its marked blocks.
func readmeTour(t *testing.T) map[string][]tourCmd {
	t.Helper()
	blocks, _ := docBlocks(t, "README.md", tourMarker)
	for _, name := range []string{"quickstart", "tour", "cluster", "certs", "nodes", "operator", "auth"} {
		if len(blocks[name]) == 0 {
			t.Fatalf("README.md has no `<!-- tour: %s -->` block with commands", name)
		}
	}
	return blocks
}

// docBlocks parses the ```sh blocks of file (relative to the repository)
// that follow a marker comment into their commands, by the marker's name;
// unmarked lists the line numbers of ```sh blocks without one.
func docBlocks(t *testing.T, file string, marker *regexp.Regexp) (blocks map[string][]tourCmd, unmarked []int) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", file))
	if err != nil {
		t.Fatal(err)
	}
	blocks = map[string][]tourCmd{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == "```sh" && (i == 0 || !marker.MatchString(strings.TrimSpace(lines[i-1]))) {
			unmarked = append(unmarked, i+1)
		}
		m := marker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			t.Fatalf("%s:%d: marker %q is not followed by a ```sh block", file, i+1, m[1])
		}
		if _, dup := blocks[m[1]]; dup {
			t.Fatalf("%s:%d: a second block named %q", file, i+1, m[1])
		}
		var cmds []tourCmd
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			l := strings.TrimSpace(lines[i])
			for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
				i++
				l = strings.TrimSpace(strings.TrimSuffix(l, "\\")) + " " + strings.TrimSpace(lines[i])
			}
			switch {
			case strings.HasPrefix(l, "# →"):
				if len(cmds) == 0 {
					t.Fatalf("%s:%d: `# →` before any command", file, i+1)
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
	return blocks, unmarked
}

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

// missing returns the first of expect that out does not print, in order:
// each must equal a line of out, `…` matching any text.
func missing(out string, expect []string) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, e := range expect {
		parts := strings.Split(e, "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		found := false
		for len(lines) > 0 && !found {
			found = re.MatchString(lines[0])
			lines = lines[1:]
		}
		if !found {
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
	portsFreeOn(t, "127.0.0.1", ports...)
}

func portsFreeOn(t *testing.T, host string, ports ...int) {
	t.Helper()
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			t.Skipf("the README's port %s:%d is busy (%v); the tour needs it", host, p, err)
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
	if t.Failed() {
		return
	}
	// dev and its nodes stopped at the cluster's cleanup.
	for k := 1; k <= 3; k++ {
		portsFreeOn(t, "127.0.0."+strconv.Itoa(k), 7400, 7401, 7402, 7403)
	}
	t.Run("tls", func(t *testing.T) {
		sh.t = t
		testTourTLS(t, sh, blocks)
	})
}

// startDocNodes starts the three nodes of a doc's serve block, given for
// n1: in a directory of its own, each gets the files the docs say to copy
// (keeping their modes), at etc when the block names them there.
func startDocNodes(t *testing.T, sh *tourShell, serve []tourCmd, etc string) []*harness.Process {
	t.Helper()
	ctx := t.Context()
	if len(serve) != 1 || !strings.HasPrefix(serve[0].line, "raftq serve --node-id n1 ") {
		t.Fatalf("the serve block is not the one raftq serve line for n1: %v", serve)
	}
	var nodes []*harness.Process
	for k := 1; k <= 3; k++ {
		id, self := "n"+strconv.Itoa(k), "10.0.0."+strconv.Itoa(k)
		// n1's line, made nK's: its id and address swap with n1's (so
		// --join names the other two), every port binds its own address.
		line := strings.NewReplacer("n1", id, "10.0.0.1", self, self, "10.0.0.1").Replace(serve[0].line)
		line = onLoopback(strings.ReplaceAll(line, "0.0.0.0:", self+":"))
		nodeDir := filepath.Join(sh.dir, "node-"+id)
		if err := os.Mkdir(nodeDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if etc != "" {
			line = strings.ReplaceAll(line, etc, nodeDir+"/")
		}
		// "Copy ca.pem, gossip.keys, bootstrap.token and each node's own
		// certificate and key to it (keep the modes)".
		for _, f := range []string{"ca.pem", "gossip.keys", "bootstrap.token", id + ".pem", id + "-key.pem"} {
			if out, code := sh.run(ctx, "cp -p pki/"+f+" node-"+id+"/"); code != 0 {
				t.Fatalf("copy %s: %s", f, out)
			}
		}
		argv := strings.Fields(line)
		argv[0] = filepath.Join(sh.dir, "bin", "raftq")
		nodes = append(nodes, startTourProcess(t, "serve-"+id, nodeDir, argv...))
	}
	return nodes
}

// waitLeader waits until line (a cluster status) shows a leader while
// every node runs.
func waitLeader(t *testing.T, sh *tourShell, nodes []*harness.Process, line string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, func() error {
		for _, n := range nodes {
			if !n.Running() {
				t.Fatalf("%s exited:\n%s", n.Name(), n.LogTail(4000))
			}
		}
		out, code := sh.run(t.Context(), line)
		if code != 0 || !leaderLine.MatchString(out) {
			return fmt.Errorf("no leader yet: exit %d: %s", code, out)
		}
		return nil
	})
}

// noSecretWarnings fails if a node warned that a secret file is readable
// by others after the docs' steps.
func noSecretWarnings(t *testing.T, nodes []*harness.Process) {
	t.Helper()
	for _, n := range nodes {
		if strings.Contains(n.LogTail(1<<20), "can be read by other users") {
			t.Errorf("%s warns that a secret file is readable, after the docs' steps:\n%s", n.Name(), n.LogTail(4000))
		}
	}
}

// onLoopback maps the README's machines 10.0.0.K to 127.0.0.K, loopback
// addresses every Linux host has.
func onLoopback(line string) string { return strings.ReplaceAll(line, "10.0.0.", "127.0.0.") }

// testTourTLS runs the README's TLS blocks: the certificates, three nodes
// started as the serve block says, the non-admin's status, and the auth
// block as the admin and as ci.
func testTourTLS(t *testing.T, sh *tourShell, blocks map[string][]tourCmd) {
	ctx := t.Context()
	for _, c := range blocks["certs"] {
		sh.check(ctx, tourCmd{line: onLoopback(c.line), expect: c.expect})
	}
	for _, f := range []string{"gossip.keys", "bootstrap.token", "ca-key.pem"} {
		fi, err := os.Stat(filepath.Join(sh.dir, "pki", f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("pki/%s is mode %v after the README's commands, want 0600", f, fi.Mode().Perm())
		}
	}
	nodes := startDocNodes(t, sh, blocks["nodes"], "")
	op := blocks["operator"]
	if len(op) == 0 {
		t.Fatal("no operator block")
	}
	waitLeader(t, sh, nodes, onLoopback(op[0].line))
	for _, c := range append(append([]tourCmd{}, op...), blocks["auth"]...) {
		sh.check(ctx, tourCmd{line: onLoopback(c.line), expect: c.expect})
	}
	noSecretWarnings(t, nodes)
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
