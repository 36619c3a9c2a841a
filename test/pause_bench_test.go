package test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// BenchmarkPauseLateness measures how late a timed pause ends: on the
// leader of three `raftq serve` processes, with a consumer's Lease stream
// open, each round pauses a fresh fairness key for 200–449 ms (the end's
// phase against the leader's timers varies), enqueues one message of it,
// and takes the time from the pause's until_ms (the answer's, on the
// leader's clock) to that message's grant (its lease deadline less the
// stream's visibility timeout: the grant entry's stamp, on the same
// clock). That is the sweep noticing the end (the leader proposes a Tick
// when NextDue says the pause ends), the Tick's commit, and the
// scheduler's pass and grant commit. It reports the p50, p99 and max in
// ms. Nothing here fails on speed.
//
//	RAFTQ_TEST_NORACE=1 go test -run '^$' -bench PauseLateness -benchtime 60x ./test
func BenchmarkPauseLateness(b *testing.B) {
	c := startBenchCluster(b, benchVariant{name: "head", bin: headBinary(b)}, 3)
	q := c.queue(b, "pause")
	bc := raftqv1.NewBrokerClient(c.conns[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const vis = 60_000
	s, err := bc.Lease(ctx, &raftqv1.LeaseRequest{Queue: q, MaxInFlight: 64, VisibilityTimeoutMs: vis, ConsumerName: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var late []time.Duration
	b.ResetTimer()
	i := 0
	for b.Loop() {
		key := fmt.Sprint("k", i)
		d := time.Duration(200+(i*37)%250) * time.Millisecond
		i++
		pr, err := bc.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: q, FairnessKey: key, DurationMs: d.Milliseconds()})
		if err != nil {
			b.Fatal(err)
		}
		var until int64
		for _, pk := range pr.GetQueue().GetPausedKeys() {
			if pk.GetKey() == key {
				until = pk.GetUntilMs()
			}
		}
		if until == 0 {
			b.Fatalf("PauseQueue answered no end for %s: %v", key, pr.GetQueue())
		}
		if _, err := bc.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: q, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte(key), FairnessKey: key}}}); err != nil {
			b.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			b.Fatal(err)
		}
		ms := resp.GetMessages()
		if len(ms) != 1 || ms[0].GetFairnessKey() != key {
			b.Fatalf("round %s: got %v", key, ms)
		}
		late = append(late, time.Duration(ms[0].GetLeaseDeadlineMs()-vis-until)*time.Millisecond)
		if _, err := bc.Ack(ctx, &raftqv1.AckRequest{Queue: q, Acks: []*raftqv1.LeaseRef{{MessageId: ms[0].GetId(), LeaseToken: ms[0].GetLeaseToken()}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(late)
	pct := func(p int) float64 { return float64(late[(len(late)-1)*p/100].Microseconds()) / 1000 }
	b.ReportMetric(pct(50), "p50-ms")
	b.ReportMetric(pct(99), "p99-ms")
	b.ReportMetric(pct(100), "max-ms")
	b.ReportMetric(0, "ns/op")
}
