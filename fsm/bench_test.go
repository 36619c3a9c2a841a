package fsm

import (
	"bytes"
	"fmt"
	"github.com/raftq/raftq/fsm/state"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func enqueueLog(index uint64, queue string, n int, payload []byte) *raft.Log {
	return enqueueLogAt(index, int64(index), queue, n, payload, func(i int) string { return fmt.Sprint(index, "-", i) })
}

func enqueueLogAt(index uint64, nowMs int64, queue string, n int, payload []byte, dedupID func(int) string) *raft.Log {
	msgs := make([]*fsmv1.EnqueueMessage, n)
	for i := range msgs {
		msgs[i] = &fsmv1.EnqueueMessage{Payload: payload, DedupId: dedupID(i)}
	}
	data, _ := Encode(&fsmv1.Command{NowMs: nowMs, Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: queue, Messages: msgs}}}}})
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

// BenchmarkApplyEnqueue: FSM cost per message (decode + index), 64 x 1 KiB
// messages per entry, each with a random 26-character dedup id as the SDK
// sends. steady-state first fills a 1 s dedup window (64,000 entries at 1
// entry per ms) so every measured entry also lapses 64 old dedup entries,
// as on a broker that has run longer than its window.
func BenchmarkApplyEnqueue(b *testing.B) {
	for _, tc := range []struct {
		name   string
		window int64
		warm   int
	}{
		{"fresh", 0, 0},
		{"steady-state", 1000, 1000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b)
			h.create("q", &fsmv1.QueueConfig{DedupWindowMs: tc.window})
			payload := make([]byte, 1024)
			rng := rand.New(rand.NewPCG(1, 2))
			randomID := func(int) string {
				const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
				var id [26]byte
				for i := range id {
					id[i] = alphabet[rng.IntN(len(alphabet))]
				}
				return string(id[:])
			}
			index := uint64(10)
			for range tc.warm {
				h.f.Apply(enqueueLogAt(index, int64(index), "q", 64, payload, randomID))
				index++
			}
			logs := make([]*raft.Log, b.N)
			for i := range logs {
				logs[i] = enqueueLogAt(index, int64(index), "q", 64, payload, randomID)
				index++
			}
			b.ResetTimer()
			for _, l := range logs {
				h.f.Apply(l)
			}
			b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/msg")
		})
	}
}

// BenchmarkMillionMessages reports heap bytes per queued 1 KiB message,
// how long Snapshot() holds the state lock (the Apply stall) with 1,000,000
// messages queued, how long persisting and restoring take.
// Run: go test -run '^$' -bench MillionMessages -benchtime 1x ./fsm
func BenchmarkMillionMessages(b *testing.B) {
	for range b.N {
		const total, perEntry = 1_000_000, 100
		f := New(Options{})
		f.ApplyCommand(1, &fsmv1.Command{NowMs: 1, Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q"}}})
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < total/perEntry; i++ {
			payload := make([]byte, 1024*perEntry) // one allocation per entry, as a decoded log entry would share
			msgs := make([]*fsmv1.EnqueueMessage, perEntry)
			for j := range msgs {
				msgs[j] = &fsmv1.EnqueueMessage{Payload: payload[j*1024 : (j+1)*1024 : (j+1)*1024], DedupId: fmt.Sprint(i, "-", j)}
			}
			f.mu.Lock()
			f.apply(uint64(i+2), &fsmv1.Command{NowMs: int64(i + 2), Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}}, state.NewTouched())
			f.mu.Unlock()
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		start := time.Now()
		snap, _ := f.Snapshot()
		stall := time.Since(start)
		b.ReportMetric(float64(stall.Microseconds())/1000, "snapshot-stall-ms")
		sink := &memSink{}
		start = time.Now()
		if err := snap.Persist(sink); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "persist-s")
		b.ReportMetric(float64(sink.Len())/(1<<20), "snapshot-MiB")
		g := New(Options{})
		start = time.Now()
		if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "restore-s")
	}
}
