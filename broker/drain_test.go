package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/metrics"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestQueueCarriesDrainEstimate: the node samples its queues on its own,
// and GetQueue carries the estimate: empty, then growing once messages
// arrive with nobody consuming.
func TestQueueCarriesDrainEstimate(t *testing.T) {
	b := startOneWith(t, func(c *Config) { c.DrainInterval = 10 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.Queues().CreateQueue(ctx, "d", nil); err != nil {
		t.Fatal(err)
	}
	waitDrain := func(want metrics.DrainState, depth int64) {
		t.Helper()
		var last *metrics.DrainEstimate
		for ctx.Err() == nil {
			q, err := b.Queues().GetQueue("d", false)
			if err != nil {
				t.Fatal(err)
			}
			if last = q.Drain; last != nil && last.State == want && last.Depth == depth {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("drain estimate %+v, want %s at depth %d", last, want, depth)
	}
	waitDrain(metrics.DrainEmpty, 0)
	var msgs []*raftqv1.EnqueueMessage
	for i := range 20 {
		msgs = append(msgs, &raftqv1.EnqueueMessage{Payload: fmt.Appendf(nil, "%d", i)})
	}
	if _, err := b.Enqueue(ctx, "d", msgs); err != nil {
		t.Fatal(err)
	}
	waitDrain(metrics.DrainGrowing, 20)
}
