package transport_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// BenchmarkUnaryCall is the handler path of one-message unary calls through
// a real gRPC connection to one in-process node (its Raft log fsync'd):
// the server's options, the interceptor, validation, the broker's
// operation with its coalescer, the projection of the answer. The client
// runs in the same process, so allocs/op and B/op hold the client's share
// too (the same in every build): compare them old against new, run the
// same way. ns/op moves with the machine's load; test/unary_bench_test.go
// (make bench-unary) splits CPU between client and servers on real
// processes.
//
//	go test -run '^$' -bench UnaryCall -benchtime 20000x ./transport
//
// (enqueue64, 64 messages per call, is there for the projection of a
// batch's ids.)
func BenchmarkUnaryCall(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{Nodes: 1, Adjust: func(_ string, c *host.Config) {
		c.Node.ReplicaCheckInterval = -1
	}})
	l := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	queues := 0
	queue := func(b *testing.B) string {
		queues++
		name := "bench-" + string(rune('a'+queues))
		if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		return name
	}
	// enqueue: 256 callers each making one-message Enqueue calls.
	b.Run("enqueue", func(b *testing.B) {
		q := queue(b)
		b.ReportAllocs()
		b.SetParallelism(128) // × GOMAXPROCS callers
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: q, Messages: []*raftqv1.EnqueueMessage{{Payload: payload}}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	// enqueue64: one caller making Enqueue calls of 64 messages (what
	// the bench tool's batch client sends); the answer's 64 ids are a
	// projection of their own.
	b.Run("enqueue64", func(b *testing.B) {
		q := queue(b)
		msgs := make([]*raftqv1.EnqueueMessage, 64)
		for i := range msgs {
			msgs[i] = &raftqv1.EnqueueMessage{Payload: payload}
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: q, Messages: msgs}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// ack: b.N messages enqueued untimed, then leased by one Lease stream
	// of max_in_flight 256 and each acked by its own unary Ack from a pool
	// of 256 ackers (the delivery's share of the stream is in the figure).
	b.Run("ack", func(b *testing.B) {
		q := queue(b)
		for left := b.N; left > 0; {
			k := min(left, 1000)
			msgs := make([]*raftqv1.EnqueueMessage, k)
			for i := range msgs {
				msgs[i] = &raftqv1.EnqueueMessage{Payload: payload}
			}
			if _, err := l.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: q, Messages: msgs}); err != nil {
				b.Fatal(err)
			}
			left -= k
		}
		const window = 256
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		b.ReportAllocs()
		b.ResetTimer()
		stream, err := l.Broker.Lease(lctx, &raftqv1.LeaseRequest{Queue: q, MaxInFlight: window})
		if err != nil {
			b.Fatal(err)
		}
		work := make(chan *raftqv1.Delivery, window)
		var acked atomic.Int64
		all := make(chan struct{})
		var wg sync.WaitGroup
		for range window {
			wg.Go(func() {
				for d := range work {
					resp, err := l.Broker.Ack(lctx, &raftqv1.AckRequest{Queue: q, Acks: []*raftqv1.LeaseRef{{MessageId: d.Id, LeaseToken: d.LeaseToken}}})
					if err != nil || !resp.Results[0].Ok {
						if lctx.Err() == nil {
							b.Errorf("ack %s: %v %v", d.Id, err, resp.GetResults())
						}
						stop()
						continue
					}
					if acked.Add(1) == int64(b.N) {
						close(all)
					}
				}
			})
		}
		wg.Go(func() {
			defer close(work)
			for {
				resp, err := stream.Recv()
				if err != nil {
					return
				}
				for _, d := range resp.Messages {
					work <- d
				}
			}
		})
		select {
		case <-all:
		case <-lctx.Done():
		}
		b.StopTimer()
		stop()
		wg.Wait()
	})
}
