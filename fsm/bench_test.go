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

func enqueueLogAt(index uint64, nowMs int64, queue string, n int, payload []byte, dedupID func(int) string) *raft.Log {
	data, _ := Encode(enqueueCmd(nowMs, queue, n, payload, dedupID))
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

func enqueueCmd(nowMs int64, queue string, n int, payload []byte, dedupID func(int) string) *fsmv1.Command {
	msgs := make([]*fsmv1.EnqueueMessage, n)
	for i := range msgs {
		msgs[i] = &fsmv1.EnqueueMessage{Payload: payload, DedupId: dedupID(i)}
	}
	return &fsmv1.Command{NowMs: nowMs, Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: queue, Messages: msgs}}}}}
}

func randomDedupID(rng *rand.Rand) func(int) string {
	return func(int) string {
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
		var id [26]byte
		for i := range id {
			id[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(id[:])
	}
}

// BenchmarkLeaderEnqueue: the leader's path for BenchmarkApplyEnqueue's
// entry (64 x 1 KiB, random dedup ids, fresh queue). propose-ns/msg is
// what the proposer's goroutine spends before raft.Apply (encode, and the
// decode of its own bytes that Proposals.Encode records); apply-ns/msg is
// the FSM's Apply under the state lock, which takes the recorded command.
// follower-ns/msg is the same entry decoded under the lock, as followers
// apply it.
func BenchmarkLeaderEnqueue(b *testing.B) {
	props := &Proposals{}
	leader, follower := New(Options{Proposals: props}), New(Options{})
	for _, f := range []*FSM{leader, follower} {
		f.ApplyCommand(1, &fsmv1.Command{NowMs: 1, Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q"}}})
	}
	payload := make([]byte, 1024)
	rng := rand.New(rand.NewPCG(1, 2))
	cmds := make([]*fsmv1.Command, b.N)
	for i := range cmds {
		cmds[i] = enqueueCmd(int64(i+10), "q", 64, payload, randomDedupID(rng))
	}
	var propose, apply, follow time.Duration
	b.ResetTimer()
	for i, cmd := range cmds {
		start := time.Now()
		data, forget, err := props.Encode(cmd)
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		l := &raft.Log{Index: uint64(i + 10), Type: raft.LogCommand, Data: data}
		leader.Apply(l)
		end := time.Now()
		forget()
		follower.Apply(l)
		propose, apply, follow = propose+mid.Sub(start), apply+end.Sub(mid), follow+time.Since(end)
	}
	msgs := float64(b.N * 64)
	b.ReportMetric(float64(propose.Nanoseconds())/msgs, "propose-ns/msg")
	// Allocations of the proposer's step alone, measured apart so the
	// applies do not mix in.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, cmd := range cmds[:min(len(cmds), 100)] {
		_, forget, _ := props.Encode(cmd)
		forget()
	}
	runtime.ReadMemStats(&after)
	n := float64(min(len(cmds), 100))
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "propose-B/entry")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "propose-allocs/entry")
	b.ReportMetric(float64(apply.Nanoseconds())/msgs, "apply-ns/msg")
	b.ReportMetric(float64(follow.Nanoseconds())/msgs, "follower-ns/msg")
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
			randomID := randomDedupID(rand.New(rand.NewPCG(1, 2)))
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
			f.apply(uint64(i+2), 1, &fsmv1.Command{NowMs: int64(i + 2), Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}}, state.NewTouched())
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
