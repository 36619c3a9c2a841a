package test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/metadata"
)

// BenchmarkGetQueue measures what confirming leadership costs a read:
// GetQueue on the leader of three `raftq serve` processes, linearizable
// (the default: raft's VerifyLeader, a heartbeat round to the followers,
// before the answer) against stale (the header raftq-read-consistency:
// stale: the local state at once, which is what every read on the leader
// did before reads were linearizable), with 1 and 16 calls outstanding.
// Each run of b.N calls alternates the two in 4 rounds so a shared
// machine's load falls on both alike; it reports calls/s and p50-ms per
// consistency. Nothing here fails on speed.
//
//	RAFTQ_TEST_NORACE=1 go test -run '^$' -bench GetQueue -benchtime 4000x ./test
func BenchmarkGetQueue(b *testing.B) {
	c := startBenchCluster(b, benchVariant{name: "head", bin: headBinary(b)}, 3)
	q := c.queue(b, "read")
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			const rounds = 4
			lat := map[string][]time.Duration{}
			elapsed := map[string]time.Duration{}
			b.StopTimer()
			for r := range rounds {
				n := b.N / rounds
				if r < b.N%rounds {
					n++
				}
				order := []string{"linearizable", "stale"}
				if r%2 == 1 {
					slices.Reverse(order)
				}
				for _, mode := range order {
					l, e := c.getQueues(b, q, mode, clients, n)
					lat[mode] = append(lat[mode], l...)
					elapsed[mode] += e
				}
			}
			for _, mode := range []string{"linearizable", "stale"} {
				ls := lat[mode]
				slices.Sort(ls)
				b.ReportMetric(float64(len(ls))/elapsed[mode].Seconds(), "calls/s:"+mode)
				if len(ls) > 0 {
					b.ReportMetric(float64(ls[len(ls)/2].Microseconds())/1000, "p50-ms:"+mode)
				}
			}
		})
	}
}

// getQueues makes n GetQueue calls on the leader from clients
// goroutines, each one call at a time, and returns every call's latency
// and the wall time of the whole.
func (c *benchCluster) getQueues(b *testing.B, queue, mode string, clients, n int) ([]time.Duration, time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if mode == "stale" {
		ctx = metadata.AppendToOutgoingContext(ctx, "raftq-read-consistency", "stale")
	}
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, n)
		wg   sync.WaitGroup
		errs = make(chan error, clients)
	)
	start := time.Now()
	for i := range clients {
		calls := n / clients
		if i < n%clients {
			calls++
		}
		cl := raftqv1.NewBrokerClient(c.conns[i%len(c.conns)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, calls)
			for range calls {
				t0 := time.Now()
				if _, err := cl.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: queue}); err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("GetQueue (%s): %v", mode, err)
	}
	return lat, elapsed
}
