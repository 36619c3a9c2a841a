package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// ThrottleOptions shape the issue-11 item-3 run: a backlog of Keys
// fairness keys × PerKey messages, each key's messages under a throttle
// key of its own, and a probe of single enqueues to another queue whose
// latency shows how long Apply waits behind scheduling passes.
type ThrottleOptions struct {
	Keys, PerKey, PayloadSize int
	ProbeRate                 float64
	Probe                     time.Duration
}

// DefaultThrottleOptions: 10,000 keys × 100 messages of 100 B, probed at
// 200 enqueues/s for 10 s.
func DefaultThrottleOptions() ThrottleOptions {
	return ThrottleOptions{Keys: 10_000, PerKey: 100, PayloadSize: 100, ProbeRate: 200, Probe: 10 * time.Second}
}

const (
	throttledQueue = "throttled"
	probeQueue     = "probe"
)

// RunThrottle measures, for each binary (label → path), the probe's
// enqueue latency beside the backlog twice on fresh single nodes: once
// with nothing throttled and no consumer (no scheduling pass touches the
// backlog), once with every key throttled (its one token spent) and an
// acking consumer with credit, so that every applied change makes the
// leader's scheduler walk the throttled keys under the state's read lock.
func RunThrottle(ctx context.Context, log *slog.Logger, bins []workload.Binary, o ThrottleOptions) workload.ThrottleResult {
	res := workload.ThrottleResult{Keys: o.Keys, PerKey: o.PerKey, PayloadSize: o.PayloadSize, ProbeRate: o.ProbeRate}
	for _, b := range bins {
		for _, throttled := range []bool{false, true} {
			run := workload.ThrottleRun{Binary: b.Label, Throttled: throttled}
			if err := runThrottle(ctx, log, b.Path, o, &run); err != nil {
				run.Error = err.Error()
				log.Error("throttle mode", "binary", b.Label, "throttled", throttled, "err", err)
			}
			res.Runs = append(res.Runs, run)
			if ctx.Err() != nil {
				return res
			}
		}
	}
	return res
}

func runThrottle(ctx context.Context, log *slog.Logger, bin string, o ThrottleOptions, run *workload.ThrottleRun) error {
	if o.Keys <= 0 || o.PerKey <= 0 || o.PayloadSize < workload.HeaderSize || o.ProbeRate <= 0 || o.Probe <= 0 {
		return errors.New("throttle options: keys, messages per key, probe rate and time must be positive, payload at least 16 bytes")
	}
	c, err := StartRaftq(ctx, log, bin, 1)
	if err != nil {
		return err
	}
	defer c.Close()
	cl, err := client.Dial(ctx, []string{c.Nodes[0].GRPC})
	if err != nil {
		return err
	}
	defer cl.Close()
	cfg := &raftqv1.QueueConfig{}
	if run.Throttled {
		// One token per key (burst 1), the next a day later.
		cfg.Throttles = map[string]*raftqv1.ThrottleRule{}
		for k := range o.Keys {
			cfg.Throttles[fmt.Sprint("t", k)] = &raftqv1.ThrottleRule{RatePerSec: 1.0 / 86400, Burst: 1}
		}
	}
	for name, qc := range map[string]*raftqv1.QueueConfig{throttledQueue: cfg, probeQueue: nil} {
		if _, err := cl.CreateQueue(ctx, name, qc); err != nil {
			return fmt.Errorf("create queue %s: %w", name, err)
		}
	}
	payloads := workload.NewPayloads(o.PayloadSize)

	// Fill: key k's messages carry throttle key tk, interleaved across keys.
	start := time.Now()
	total := int64(o.Keys) * int64(o.PerKey)
	const batch, workers = 500, 8
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				first := next.Add(batch) - batch
				if first >= total || ctx.Err() != nil {
					return
				}
				n := min(batch, total-first)
				msgs := make([]*raftqv1.EnqueueMessage, n)
				now := time.Now()
				for i := range msgs {
					k := (first + int64(i)) % int64(o.Keys)
					msgs[i] = &raftqv1.EnqueueMessage{
						Payload:      payloads.Make(workload.MakeKey(3, 0, uint64(first)+uint64(i)), now),
						FairnessKey:  fmt.Sprint("k", k),
						ThrottleKeys: []string{fmt.Sprint("t", k)},
					}
				}
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := cl.Enqueue(cctx, throttledQueue, msgs...)
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
	if err := <-errc; err != nil {
		return err
	}
	run.FillSecs = time.Since(start).Seconds()
	log.Info("throttle: filled", "messages", total, "seconds", run.FillSecs, "throttled", run.Throttled)

	if run.Throttled {
		// A consumer that acks what it gets: each key's one token, then
		// nothing, with credit left, so every pass walks the keys.
		var got atomic.Int64
		con := client.NewConsumer(cl, throttledQueue, func(context.Context, *raftqv1.Delivery) error {
			got.Add(1)
			return nil
		}, client.ConsumerOptions{MaxInFlight: 1000})
		cctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- con.Run(cctx) }()
		defer func() {
			stop()
			<-done
		}()
		err := poll(ctx, 5*time.Minute, 100*time.Millisecond, "each key's token delivered", func(context.Context) error {
			if n := got.Load(); n < int64(o.Keys) {
				return fmt.Errorf("%d of %d delivered", n, o.Keys)
			}
			return nil
		})
		if err != nil {
			return err
		}
		run.Delivered = got.Load()
	}

	tr := newTrickle(cl, payloads, o.ProbeRate)
	tr.queue = probeQueue
	tctx, stopTrickle := context.WithCancel(ctx)
	trickleDone := make(chan struct{})
	probeStart := time.Now()
	go func() { defer close(trickleDone); tr.run(tctx) }()
	serr := harness.Sleep(ctx, o.Probe)
	stopTrickle()
	<-trickleDone
	el := time.Since(probeStart)
	_, run.Probe = tr.split(probeStart, time.Now().Add(time.Hour))
	run.ProbeErrors = tr.errors.Load()
	run.ProbeAchieved = float64(tr.acked.Load()) / el.Seconds()
	log.Info("throttle: probed", "throttled", run.Throttled, "p50_ms", run.Probe.P50, "p99_ms", run.Probe.P99, "max_ms", run.Probe.Max)
	return serr
}
