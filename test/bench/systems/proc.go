// Package systems starts the brokers the benchmark compares — raftq, NATS
// JetStream and RabbitMQ quorum queues, each as real processes on loopback
// (test/harness runs them) — and drives them through workload.Driver.
// Every process it starts runs in its own process group and is killed,
// with its temp dir removed, by the Close of what started it.
package systems

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// startProcess runs argv with env added to the environment, output to
// logPath, in a new process group.
func startProcess(name, logPath string, env []string, argv ...string) (*harness.Process, error) {
	return harness.StartProcess(harness.Command{Name: name, Argv: argv, Env: env, LogPath: logPath})
}

// serverWrap is put before every broker server's command:
// `taskset -c $RAFTQ_BENCH_NODE_CPUS` when that is set, so that the
// servers and the load generator (run under `taskset -c` on the other
// cores) do not share a core and each one's CPU per message is its own
// (docs/benchmarks.md, the unary path's client/server split).
func serverWrap() []string {
	if cpus := os.Getenv("RAFTQ_BENCH_NODE_CPUS"); cpus != "" {
		return []string{"taskset", "-c", cpus}
	}
	return nil
}

// poll is harness.WaitFor naming what it waited for.
func poll(ctx context.Context, timeout, interval time.Duration, what string, f func(context.Context) error) error {
	if err := harness.WaitFor(ctx, timeout, interval, f); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// dirSize is the total size of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// System is a running broker deployment: the workload target and how to
// take it down.
type System struct {
	workload.Target
	close func()
}

// Close stops every process of the system and removes its files.
func (s *System) Close() {
	if s.close != nil {
		s.close()
	}
}

// Starter starts one kind of system; Name is what -systems selects.
type Starter struct {
	Name  string
	Start func(ctx context.Context, log *slog.Logger) (*System, error)
}
