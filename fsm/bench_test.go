package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func enqueueLog(index uint64, queue string, n int, payload []byte) *raft.Log {
	msgs := make([]*raftqv1.EnqueueMessage, n)
	for i := range msgs {
		msgs[i] = &raftqv1.EnqueueMessage{Payload: payload, DedupId: fmt.Sprint(index, "-", i)}
	}
	data, _ := Encode(&fsmv1.Command{NowMs: int64(index), Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: queue, Messages: msgs}}}}})
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

// BenchmarkApplyEnqueue: FSM cost per message (decode + index), 64 x 1 KiB
// messages per entry.
func BenchmarkApplyEnqueue(b *testing.B) {
	h := newHarness(b)
	h.create("q", nil)
	payload := make([]byte, 1024)
	logs := make([]*raft.Log, b.N)
	for i := range logs {
		logs[i] = enqueueLog(uint64(i+10), "q", 64, payload)
	}
	b.ResetTimer()
	for _, l := range logs {
		h.f.Apply(l)
	}
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkMillionMessages reports heap bytes per queued 1 KiB message,
// how long Snapshot() holds the state lock (the Apply stall) with 1,000,000
// messages queued, how long persisting and restoring take.
// Run: go test -run '^$' -bench MillionMessages -benchtime 1x ./fsm
func BenchmarkMillionMessages(b *testing.B) {
	for range b.N {
		const total, perEntry = 1_000_000, 100
		f := New(nil)
		f.ApplyCommand(1, &fsmv1.Command{NowMs: 1, Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q"}}})
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < total/perEntry; i++ {
			payload := make([]byte, 1024*perEntry) // one allocation per entry, as a decoded log entry would share
			msgs := make([]*raftqv1.EnqueueMessage, perEntry)
			for j := range msgs {
				msgs[j] = &raftqv1.EnqueueMessage{Payload: payload[j*1024 : (j+1)*1024 : (j+1)*1024], DedupId: fmt.Sprint(i, "-", j)}
			}
			f.mu.Lock()
			f.applyCommand(uint64(i+2), &fsmv1.Command{NowMs: int64(i + 2), Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}}, newTouchSet())
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
		g := New(nil)
		start = time.Now()
		if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "restore-s")
	}
}
