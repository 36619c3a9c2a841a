package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestKill9LosesNoAcknowledgedMessage: producers enqueue while the server
// is killed with SIGKILL; after a restart every enqueue that was
// acknowledged is still there, exactly once.
func TestKill9LosesNoAcknowledgedMessage(t *testing.T) {
	n, c := startSingle(t)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "durable", nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked = map[string]string{} // payload -> id
		count atomic.Int64
		wg    sync.WaitGroup
	)
	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; pctx.Err() == nil; i++ {
				payload := fmt.Sprintf("p%d-%d", p, i)
				cctx, cancel := context.WithTimeout(pctx, 2*time.Second)
				ids, err := c.Enqueue(cctx, "durable", &raftqv1.EnqueueMessage{Payload: []byte(payload)})
				cancel()
				if err != nil {
					return // the server is gone; unknown outcomes are allowed to exist or not
				}
				mu.Lock()
				acked[payload] = ids[0]
				mu.Unlock()
				count.Add(1)
			}
		}()
	}
	harness.Eventually(t, 30*time.Second, func() error {
		if count.Load() < 300 {
			return fmt.Errorf("%d enqueues acknowledged", count.Load())
		}
		return nil
	})
	n.Kill()
	stopProducers()
	wg.Wait()
	n.Start()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := harness.WaitReady(rctx, c); err != nil {
		t.Fatal(err)
	}
	qi, err := c.GetQueue(ctx, "durable", false)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if qi.Stats.Ready < int64(len(acked)) {
		t.Fatalf("after restart %d ready, but %d enqueues were acknowledged", qi.Stats.Ready, len(acked))
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ds := recvN(t, openLease(t, sctx, n, "durable", 10000), int(qi.Stats.Ready))
	seen := map[string]int{}
	for _, d := range ds {
		seen[string(d.Payload)]++
	}
	for payload, id := range acked {
		if seen[payload] != 1 {
			t.Fatalf("acknowledged message %s (%s) delivered %d times after restart", payload, id, seen[payload])
		}
	}
	t.Logf("%d acknowledged before kill -9, %d present after restart", len(acked), len(ds))
}
