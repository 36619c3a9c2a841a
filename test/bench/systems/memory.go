package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// MemoryOptions shape the issue-2 run.
type MemoryOptions struct {
	Messages    int64
	PayloadSize int
	Batch       int
	Concurrency int
	// TrickleRate enqueues per second run (open loop: each on its own
	// schedule, so a stall delays every call made during it) for Baseline
	// before the snapshot, during it, and one second after.
	TrickleRate float64
	Baseline    time.Duration
	// Headers per message (issue 24's shape: two, beside the dedup id the
	// SDK gives every message), and how long the node idles after the
	// last enqueue before its VmRSS is read (issue 24: 30 s).
	Headers int
	Settle  time.Duration
}

// DefaultMemoryOptions: a million 1 KiB messages in batches of 100.
func DefaultMemoryOptions() MemoryOptions {
	return MemoryOptions{Messages: 1_000_000, PayloadSize: 1024, Batch: 100, Concurrency: 16, TrickleRate: 200, Baseline: 3 * time.Second,
		Headers: 2, Settle: 30 * time.Second}
}

const memoryQueue = "memory"

// RunMemory starts one raftq node, fills it with o.Messages messages and
// reports its resident memory, the enqueue latency seen while a snapshot
// is taken, and how long it takes to come back after kill -9.
func RunMemory(ctx context.Context, log *slog.Logger, bin string, o MemoryOptions) workload.MemoryResult {
	res := workload.MemoryResult{Messages: o.Messages, PayloadSize: o.PayloadSize, PayloadBytes: o.Messages * int64(o.PayloadSize), TrickleRate: o.TrickleRate,
		Headers: o.Headers, SettleSecs: o.Settle.Seconds()}
	if err := runMemory(ctx, log, bin, o, &res); err != nil {
		res.Error = err.Error()
		log.Error("memory mode", "err", err)
	}
	return res
}

func runMemory(ctx context.Context, log *slog.Logger, bin string, o MemoryOptions, res *workload.MemoryResult) error {
	if o.Messages <= 0 || o.Batch <= 0 || o.Concurrency <= 0 || o.PayloadSize < workload.HeaderSize || o.TrickleRate <= 0 || o.Headers < 0 || o.Settle < 0 {
		return errors.New("memory options: messages, batch, concurrency and trickle rate must be positive, headers and settle not negative, payload at least 16 bytes")
	}
	// No automatic snapshot: the fill alone is past the default threshold,
	// and one taken during the fill, the RSS wait or the trickle's baseline
	// would be measured as if it were not there. Only the snapshot this
	// mode asks for runs.
	c, err := StartRaftq(ctx, log, bin, 1, "--snapshot-threshold", "1000000000000")
	if err != nil {
		return err
	}
	defer c.Close()
	node := c.Nodes[0]
	cl, err := client.Dial(ctx, []string{node.GRPC})
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := cl.CreateQueue(ctx, memoryQueue, nil); err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	payloads := workload.NewPayloads(o.PayloadSize)

	// Fill.
	pid, err := node.Pid()
	if err != nil {
		return err
	}
	cpuBefore, cpuErr := workload.CPU(pid)
	start := time.Now()
	if err := fillMemory(ctx, cl, o, payloads); err != nil {
		return err
	}
	el := time.Since(start)
	res.EnqueueSecs, res.EnqueueRate = el.Seconds(), float64(o.Messages)/el.Seconds()
	if cpuAfter, err := workload.CPU(pid); err == nil && cpuErr == nil {
		res.FillCPUSecs = (cpuAfter - cpuBefore).Seconds()
	}
	if res.RSSAtFillBytes, err = workload.RSS(pid); err != nil {
		return err
	}
	log.Info("memory: filled", "messages", o.Messages, "seconds", res.EnqueueSecs, "rss_mib", res.RSSAtFillBytes>>20, "settle", o.Settle)
	if err := harness.Sleep(ctx, o.Settle); err != nil {
		return err
	}
	if res.RSSBytes, err = workload.RSS(pid); err != nil {
		return err
	}
	log.Info("memory: settled", "rss_mib", res.RSSBytes>>20)

	// Snapshot under a trickle.
	tr := newTrickle(cl, payloads, o.TrickleRate)
	tctx, stopTrickle := context.WithCancel(ctx)
	trickleDone := make(chan struct{})
	go func() { defer close(trickleDone); tr.run(tctx) }()
	if err := harness.Sleep(ctx, o.Baseline); err != nil {
		stopTrickle()
		<-trickleDone
		return err
	}
	otherCPU := workload.StartOtherCPU(pid)
	snapStart := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	_, serr := cl.Snapshot(sctx)
	cancel()
	snapEnd := time.Now()
	res.SnapshotOtherCores = -1 // unknown unless /proc could be read
	if other, err := otherCPU(); err == nil {
		res.SnapshotOtherCores = other.Seconds() / snapEnd.Sub(snapStart).Seconds()
	}
	_ = harness.Sleep(ctx, time.Second)
	stopTrickle()
	<-trickleDone
	if serr != nil {
		return fmt.Errorf("snapshot: %w", serr)
	}
	res.SnapshotSecs = snapEnd.Sub(snapStart).Seconds()
	res.SnapshotBytes = dirSize(filepath.Join(node.DataDir, "snapshots"))
	res.TrickleBaseline, res.TrickleSnapshot = tr.split(snapStart, snapEnd)
	if res.RSSAfterSnapshot, err = workload.RSS(pid); err != nil {
		return err
	}
	log.Info("memory: snapshot", "seconds", res.SnapshotSecs, "trickle_max_ms", res.TrickleSnapshot.Max, "trickle_errors", tr.errors.Load())

	// kill -9 and restart.
	res.Expected = o.Messages + tr.acked.Load()
	node.Kill()
	restart := time.Now()
	if err := node.Launch(); err != nil {
		return err
	}
	probe := cl.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1})
	answered := false
	err = poll(ctx, 10*time.Minute, 20*time.Millisecond, "restart", func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		qs, err := probe.ListQueues(cctx, memoryQueue)
		if err != nil {
			return err
		}
		if !answered {
			answered = true
			res.RestartAnswerSecs = time.Since(restart).Seconds()
		}
		for _, q := range qs {
			if q.GetName() == memoryQueue {
				res.Found = q.GetStats().GetReady()
			}
		}
		if res.Found < res.Expected {
			return fmt.Errorf("%d of %d messages", res.Found, res.Expected)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.RestartReadySecs = time.Since(restart).Seconds()
	if pid, err = node.Pid(); err == nil {
		res.RSSAfterRestart, _ = workload.RSS(pid)
		if cpu, err := workload.CPU(pid); err == nil {
			res.RestartCPUSecs = cpu.Seconds()
		}
	}
	return nil
}

// fillMemory enqueues o.Messages messages of the memory mode's shape into
// memoryQueue, o.Batch per call with o.Concurrency calls outstanding.
func fillMemory(ctx context.Context, cl *client.Client, o MemoryOptions, payloads *workload.Payloads) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, o.Concurrency)
	for range o.Concurrency {
		wg.Go(func() {
			for {
				first := next.Add(int64(o.Batch)) - int64(o.Batch)
				if first >= o.Messages || ctx.Err() != nil {
					return
				}
				n := min(int64(o.Batch), o.Messages-first)
				msgs := make([]*raftqv1.EnqueueMessage, n)
				now := time.Now()
				for i := range msgs {
					seq := uint64(first) + uint64(i)
					msgs[i] = &raftqv1.EnqueueMessage{Payload: payloads.Make(workload.MakeKey(1, 0, seq), now), Headers: memoryHeaders(o.Headers, seq)}
				}
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := cl.Enqueue(cctx, memoryQueue, msgs...)
				cancel()
				if err != nil {
					errc <- fmt.Errorf("fill: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// memoryHeaders are n headers of the kind a producer sets: a per-message
// trace id and a content type shared by all (so n = 2 is issue 24's
// shape).
func memoryHeaders(n int, seq uint64) map[string]string {
	if n == 0 {
		return nil
	}
	h := make(map[string]string, n)
	h["trace-id"] = fmt.Sprintf("%016x", seq*0x9e3779b97f4a7c15)
	for i := 1; i < n; i++ {
		h[fmt.Sprint("content-type", i)] = "application/json"
	}
	return h
}

// trickle is an open-loop stream of single-message enqueues.
type trickle struct {
	cl       *client.Client
	queue    string
	payloads *workload.Payloads
	every    time.Duration
	mu       sync.Mutex
	calls    []call
	acked    atomic.Int64
	errors   atomic.Int64
	seq      atomic.Uint64
}

type call struct {
	start time.Time
	took  time.Duration
}

func newTrickle(cl *client.Client, p *workload.Payloads, rate float64) *trickle {
	return &trickle{cl: cl, queue: memoryQueue, payloads: p, every: time.Duration(float64(time.Second) / rate)}
}

// run starts one call per tick until ctx ends, then waits for them.
func (t *trickle) run(ctx context.Context) {
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Go(func() {
			start := time.Now()
			m := &raftqv1.EnqueueMessage{Payload: t.payloads.Make(workload.MakeKey(2, 0, t.seq.Add(1)), start)}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			_, err := t.cl.Enqueue(cctx, t.queue, m)
			cancel()
			if err != nil {
				t.errors.Add(1)
				return
			}
			t.acked.Add(1)
			t.mu.Lock()
			t.calls = append(t.calls, call{start, time.Since(start)})
			t.mu.Unlock()
		})
	}
}

// split summarizes the calls made before from, and those in flight at any
// moment in [from, to].
func (t *trickle) split(from, to time.Time) (before, during workload.LatencySummary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b, d []time.Duration
	for _, c := range t.calls {
		end := c.start.Add(c.took)
		switch {
		case end.Before(from):
			b = append(b, c.took)
		case !c.start.After(to):
			d = append(d, c.took)
		}
	}
	return workload.Summarize(b), workload.Summarize(d)
}
