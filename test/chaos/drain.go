//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// Drain consumes every queue and its dead-letter queue with consumers that
// ack everything, until all are empty (nothing ready, delayed or in flight
// twice in a row) or timeout passes. Leases abandoned by the chaos
// consumers come back when they expire and are drained too.
func (w *Workload) Drain(ctx context.Context, queues []QueueSpec, timeout time.Duration) DrainResult {
	dctx, stop := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	for i, q := range queues {
		for j, name := range []string{q.Name, q.DeadLetter} {
			co := w.NewConsumer("drain-"+name, name, true, uint64(1000+2*i+j))
			consumers.Go(func() { co.Run(dctx) })
		}
	}
	defer func() {
		stop()
		consumers.Wait()
		w.Wait()
	}()
	empty := 0
	var last string
	err := harness.WaitFor(ctx, timeout, 250*time.Millisecond, func(ctx context.Context) error {
		ok, desc := w.queuesEmpty(ctx, queues)
		last = desc
		if !ok {
			empty = 0
			return errors.New(desc)
		}
		if empty++; empty < 2 {
			return errors.New("empty once; asking again")
		}
		return nil
	})
	if err == nil {
		return DrainResult{Complete: true}
	}
	return DrainResult{Leftover: fmt.Sprintf("after %v: %s", timeout, last)}
}

// queuesEmpty asks the cluster for every queue's stats.
func (w *Workload) queuesEmpty(ctx context.Context, queues []QueueSpec) (bool, string) {
	var parts []string
	empty := true
	for _, q := range queues {
		for _, name := range []string{q.Name, q.DeadLetter} {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			qi, err := w.cl.GetQueue(cctx, name, false)
			cancel()
			if err != nil {
				empty = false
				parts = append(parts, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			st := qi.GetStats()
			if st.GetReady()+st.GetDelayed()+st.GetInFlight() > 0 {
				empty = false
			}
			parts = append(parts, fmt.Sprintf("%s: ready=%d delayed=%d in_flight=%d", name, st.GetReady(), st.GetDelayed(), st.GetInFlight()))
		}
	}
	return empty, strings.Join(parts, "; ")
}
