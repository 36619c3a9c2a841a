package broker

import (
	"context"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// BenchmarkBrokerEnqueue is what one single-message Enqueue costs the
// broker below gRPC: the coalescer, Propose, Raft with its fsync'd log on
// one node, and the state machine. Allocations per call are the figure to
// compare (the machine's load moves ns/op). "one" is one call at a time
// (an entry per call: the latency path); "concurrent" has 256 calls in
// flight, which the coalescer merges into shared entries.
func BenchmarkBrokerEnqueue(b *testing.B) {
	br := startOne(b, nil)
	ctx := context.Background()
	if _, err := br.Queues().CreateQueue(ctx, "q", &raftqv1.QueueConfig{}); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	enqueue := func(b *testing.B) {
		if _, err := br.Enqueue(ctx, "q", []*raftqv1.EnqueueMessage{{Payload: payload}}); err != nil {
			b.Error(err)
		}
	}
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			enqueue(b)
		}
	})
	b.Run("concurrent", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(128) // × GOMAXPROCS callers
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				enqueue(b)
			}
		})
	})
}
