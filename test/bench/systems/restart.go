package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// RestartOptions shape the restart mode: one node filled as the memory
// mode fills it, a snapshot, a short tail of entries after it (what a
// node has after its own automatic snapshot), kill -9; then copies of
// that data dir are started Rounds times by each binary in turn.
type RestartOptions struct {
	Fill MemoryOptions // Messages, PayloadSize, Batch, Concurrency, Headers
	// Tail is how many one-message enqueues follow the snapshot: the Raft
	// log entries the restart replays after restoring it.
	Tail   int
	Rounds int
	// ProfileDir, if set, has each restart write a CPU profile and an
	// execution trace of its start there (raftq serve --startup-profile).
	ProfileDir string
	// Keep, if set, is where the filled data dir is copied (with the
	// count of messages it holds in Keep/expected), and From a data dir
	// kept so that is restarted instead of filling one.
	Keep, From string
}

// DefaultRestartOptions: the memory mode's million, 200 entries of tail
// (one second of the memory mode's trickle), three rounds.
func DefaultRestartOptions() RestartOptions {
	return RestartOptions{Fill: DefaultMemoryOptions(), Tail: 200, Rounds: 3}
}

// RunRestart fills one node of bins[0] and times restarts of copies of its
// data dir by every binary, Rounds times each, alternating so that the
// machine's load falls on each alike.
func RunRestart(ctx context.Context, log *slog.Logger, bins []workload.Binary, o RestartOptions) workload.RestartResult {
	res := workload.RestartResult{Messages: o.Fill.Messages, PayloadSize: o.Fill.PayloadSize, Headers: o.Fill.Headers, Tail: o.Tail}
	if err := runRestart(ctx, log, bins, o, &res); err != nil {
		res.Error = err.Error()
		log.Error("restart mode", "err", err)
	}
	return res
}

func runRestart(ctx context.Context, log *slog.Logger, bins []workload.Binary, o RestartOptions, res *workload.RestartResult) error {
	f := o.Fill
	if len(bins) == 0 || f.Messages <= 0 || f.Batch <= 0 || f.Concurrency <= 0 || f.PayloadSize < workload.HeaderSize || f.Headers < 0 || o.Tail < 0 || o.Rounds <= 0 {
		return errors.New("restart options: a binary, positive messages, batch, concurrency and rounds, headers and tail not negative, payload at least 16 bytes")
	}
	// As in the memory mode, no automatic snapshot during the fill: the
	// one snapshot is the one taken after it.
	args := []string{"--snapshot-threshold", "1000000000000"}
	var node *harness.Node
	if o.From != "" {
		b, err := os.ReadFile(filepath.Join(o.From, "expected"))
		if err != nil {
			return fmt.Errorf("-restart-from: %w", err)
		}
		var ports harness.Ports
		if _, err := fmt.Sscanf(string(b), "%d %d %d %d %d", &res.Expected, &ports.GRPC, &ports.Raft, &ports.Gossip, &ports.HTTP); err != nil {
			return fmt.Errorf("-restart-from: %s/expected: %w", o.From, err)
		}
		node = &harness.Node{ID: "n1", DataDir: filepath.Join(o.From, "data")}
		res.SnapshotBytes = dirSize(filepath.Join(node.DataDir, "snapshots"))
		res.DataDirBytes = dirSize(node.DataDir)
		return restartRounds(ctx, log, node, ports, bins, args, o, res)
	}
	c, err := StartRaftq(ctx, log, bins[0].Path, 1, args...)
	if err != nil {
		return err
	}
	defer c.Close()
	node = c.Nodes[0]
	cl, err := client.Dial(ctx, []string{node.GRPC})
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := cl.CreateQueue(ctx, memoryQueue, nil); err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	payloads := workload.NewPayloads(f.PayloadSize)
	start := time.Now()
	if err := fillMemory(ctx, cl, f, payloads); err != nil {
		return err
	}
	res.FillSecs = time.Since(start).Seconds()
	log.Info("restart: filled", "messages", f.Messages, "seconds", res.FillSecs)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	_, err = cl.Snapshot(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for i := range o.Tail {
		m := &raftqv1.EnqueueMessage{Payload: payloads.Make(workload.MakeKey(2, 0, uint64(i)), time.Now())}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := cl.Enqueue(cctx, memoryQueue, m)
		cancel()
		if err != nil {
			return fmt.Errorf("tail: %w", err)
		}
	}
	res.Expected = f.Messages + int64(o.Tail)
	node.Kill()
	res.SnapshotBytes = dirSize(filepath.Join(node.DataDir, "snapshots"))
	res.DataDirBytes = dirSize(node.DataDir)
	ports, err := nodePorts(node)
	if err != nil {
		return err
	}
	if o.Keep != "" {
		if err := os.MkdirAll(o.Keep, 0o755); err != nil {
			return err
		}
		if out, err := exec.CommandContext(ctx, "cp", "-a", node.DataDir, filepath.Join(o.Keep, "data")).CombinedOutput(); err != nil {
			return fmt.Errorf("-restart-keep: %w: %s", err, out)
		}
		desc := fmt.Sprintf("%d %d %d %d %d\n", res.Expected, ports.GRPC, ports.Raft, ports.Gossip, ports.HTTP)
		if err := os.WriteFile(filepath.Join(o.Keep, "expected"), []byte(desc), 0o644); err != nil {
			return err
		}
	}
	return restartRounds(ctx, log, node, ports, bins, args, o, res)
}

// restartRounds restarts copies of node's data dir Rounds times with each
// binary.
func restartRounds(ctx context.Context, log *slog.Logger, node *harness.Node, ports harness.Ports, bins []workload.Binary, args []string, o RestartOptions, res *workload.RestartResult) error {
	for round := range o.Rounds {
		for k := range bins {
			b := bins[(k+round)%len(bins)] // each binary first in turn
			run, err := restartOnce(ctx, log, node, ports, b, args, o, round, res.Expected)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", b.Label, round+1, err)
			}
			res.Runs = append(res.Runs, run)
			log.Info("restart", "binary", b.Label, "round", round+1, "all_visible_s", run.ReadySecs, "restore_s", run.RestoreSecs, "load", run.LoadAvg)
		}
	}
	return nil
}

// restartOnce starts bin on a copy of node's data dir, on node's ports,
// and times it until every message is visible.
func restartOnce(ctx context.Context, log *slog.Logger, node *harness.Node, ports harness.Ports, b workload.Binary, args []string, o RestartOptions, round int, expected int64) (workload.RestartRun, error) {
	run := workload.RestartRun{Binary: b.Label, Round: round + 1}
	dir, err := os.MkdirTemp("", "raftq-restart-")
	if err != nil {
		return run, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return run, err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", node.DataDir, filepath.Join(dir, "data")).CombinedOutput(); err != nil {
		return run, fmt.Errorf("copy the data dir: %w: %s", err, out)
	}
	args = append([]string(nil), args...)
	if o.ProfileDir != "" {
		run.Profile = filepath.Join(o.ProfileDir, fmt.Sprintf("restart-%s-%d", b.Label, round+1))
		args = append(args, "--startup-profile", run.Profile)
	}
	n, err := harness.NewNode(harness.NodeConfig{ID: node.ID, Bin: b.Path, Dir: dir, Host: "127.0.0.1", Ports: ports, Args: args})
	if err != nil {
		return run, err
	}
	defer n.Kill()
	if la, err := workload.LoadAverage(); err == nil {
		run.LoadAvg = la
	}
	cl, err := client.Dial(ctx, []string{n.GRPC}, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		return run, err
	}
	defer cl.Close()
	start := time.Now()
	if err := n.Launch(); err != nil {
		return run, err
	}
	answered := false
	err = poll(ctx, 10*time.Minute, 20*time.Millisecond, "restart", func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		qs, err := cl.ListQueues(cctx, memoryQueue)
		if err != nil {
			return err
		}
		if !answered {
			answered = true
			run.AnswerSecs = time.Since(start).Seconds()
		}
		var found int64
		for _, q := range qs {
			if q.GetName() == memoryQueue {
				found = q.GetStats().GetReady()
			}
		}
		if found < expected {
			return fmt.Errorf("%d of %d messages", found, expected)
		}
		return nil
	})
	if err != nil {
		return run, fmt.Errorf("%w (log: %s)", err, n.LogTail(2000))
	}
	run.ReadySecs = time.Since(start).Seconds()
	if pid, err := n.Pid(); err == nil {
		// CPU is what the restart costs whatever the machine's load;
		// the wall time is that and the wait for a core.
		if cpu, err := workload.CPU(pid); err == nil {
			run.CPUSecs = cpu.Seconds()
		}
		run.RSSBytes, _ = workload.RSS(pid)
	}
	if la, err := workload.LoadAverage(); err == nil {
		run.LoadAvgEnd = la
	}
	if o.ProfileDir != "" {
		// The profile ends once the node leads with its log applied.
		_ = poll(ctx, time.Minute, 50*time.Millisecond, "startup profile", func(context.Context) error {
			if !strings.Contains(n.Log(), "startup profile written") {
				return errors.New("not yet")
			}
			return nil
		})
	}
	logText := n.Log()
	run.RestoreSecs = logDuration(logText, "restored state from snapshot", "elapsed")
	run.StartupSecs = logDuration(logText, "raftq node started", "startup")
	return run, nil
}

// nodePorts are the ports node listens on.
func nodePorts(n *harness.Node) (harness.Ports, error) {
	var p harness.Ports
	for _, f := range []struct {
		addr string
		port *int
	}{{n.GRPC, &p.GRPC}, {n.Raft, &p.Raft}, {n.Gossip, &p.Gossip}, {n.HTTP, &p.HTTP}} {
		i := strings.LastIndexByte(f.addr, ':')
		v, err := strconv.Atoi(f.addr[i+1:])
		if err != nil {
			return p, fmt.Errorf("port of %s: %w", f.addr, err)
		}
		*f.port = v
	}
	return p, nil
}

// logDuration finds the first log line holding msg and returns its key=
// duration in seconds, -1 if there is none.
func logDuration(log, msg, key string) float64 {
	re := regexp.MustCompile(regexp.QuoteMeta(key) + `=(\S+)`)
	for line := range strings.Lines(log) {
		if !strings.Contains(line, msg) {
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				return d.Seconds()
			}
		}
	}
	return -1
}
