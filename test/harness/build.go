// Package harness is the one kit the black-box tests, the chaos harness
// (test/chaos) and the benchmark (test/bench) use to run real processes:
// it builds the raftq binary, reserves free loopback ports, starts
// processes in their own process groups with their own data dirs and
// logs, kills (-9), stops, pauses and restarts them, and waits for
// conditions with deadlines (or paces work with a context-aware sleep).
//
// Files: build.go (Build), ports.go (FreePorts), process.go (Process: any
// child process), tree.go (a process's descendants from /proc), node.go
// (Node: one `raftq serve`), testing.go (TestNode, Dial, WaitReady for Go
// tests), wait.go (WaitFor, Eventually, Sleep), watch.go (WatchChanges:
// record each change of a polled value), disk_linux.go (SmallTmpfs,
// FillDisk: a small disk for tests that fill it).
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// repoRoot is the checkout this package was compiled from.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build compiles cmd/raftq into dir (with the race detector when race is
// set) and returns the binary's path.
func Build(ctx context.Context, dir string, race bool) (string, error) {
	root := repoRoot()
	bin := filepath.Join(dir, "raftq")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/raftq")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// ErrNoHistory: the checkout cannot produce an earlier revision (no git,
// not a git checkout, a shallow clone, or the commit is not in it).
var ErrNoHistory = errors.New("harness: this checkout has no history to build from")

// BuildRevision compiles cmd/raftq as it was at commit rev of this
// repository's own history into dir and returns the binary's path. The
// revision is checked out with `git worktree add --detach` into dir and
// the worktree is removed again before returning, whatever happens. Its
// modules come through the module proxy like any build's. ErrNoHistory
// (wrapped, with the reason) says the checkout cannot do it.
func BuildRevision(ctx context.Context, dir, rev string) (_ string, err error) {
	root := repoRoot()
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("%w: git is not installed", ErrNoHistory)
	}
	if _, err := git("rev-parse", "--git-dir"); err != nil {
		return "", fmt.Errorf("%w: not a git checkout (%v)", ErrNoHistory, err)
	}
	if shallow, _ := git("rev-parse", "--is-shallow-repository"); shallow == "true" {
		if _, err := git("cat-file", "-e", rev+"^{commit}"); err != nil {
			return "", fmt.Errorf("%w: a shallow clone without commit %s (git fetch --unshallow)", ErrNoHistory, rev)
		}
	}
	if _, err := git("cat-file", "-e", rev+"^{commit}"); err != nil {
		return "", fmt.Errorf("%w: commit %s is not in this checkout", ErrNoHistory, rev)
	}
	src := filepath.Join(dir, "src-"+rev[:min(len(rev), 12)])
	if _, err := git("worktree", "add", "--detach", src, rev); err != nil {
		return "", err
	}
	defer func() {
		// Remove the checkout and git's record of it, even if the build
		// failed; a failure to do so is the caller's to know.
		if _, rerr := git("worktree", "remove", "--force", src); rerr != nil {
			_ = os.RemoveAll(src)
			_, _ = git("worktree", "prune")
			err = errors.Join(err, rerr)
		}
	}()
	bin := filepath.Join(dir, "raftq-"+rev[:min(len(rev), 12)])
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/raftq")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %w\n%s", rev, err, out)
	}
	return bin, nil
}
