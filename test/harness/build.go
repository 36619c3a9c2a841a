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
// tests), wait.go (WaitFor, Eventually, Sleep).
package harness

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build compiles cmd/raftq into dir (with the race detector when race is
// set) and returns the binary's path.
func Build(ctx context.Context, dir string, race bool) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
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
