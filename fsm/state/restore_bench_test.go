package state

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// restoreBenchStore is a store of n messages of issue 24's shape (1 KiB,
// two headers, a dedup id each) at cluster version MaxLogVersion, enqueued
// 100 per entry as the memory mode's fill does.
func restoreBenchStore(tb testing.TB, n int) *Store {
	tb.Helper()
	s := New()
	if r := s.Begin(1, 1, MaxLogVersion, 1, NewTouched()).SetClusterVersion(&fsmv1.SetClusterVersion{Version: MaxLogVersion, MetaFounders: []*fsmv1.MetaServer{{Id: "n1", Address: "127.0.0.1:7001"}}}); r.Err != nil {
		tb.Fatal(r.Err)
	}
	s.Begin(2, 1, MaxLogVersion, 2, NewTouched()).CreateQueue(&fsmv1.CreateQueue{Name: "memory"})
	const batch = 100
	for first := 0; first < n; first += batch {
		msgs := make([]*fsmv1.EnqueueMessage, 0, batch)
		payload := make([]byte, 1024*batch)
		for i := first; i < min(first+batch, n); i++ {
			j := i - first
			msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: payload[j*1024 : (j+1)*1024 : (j+1)*1024],
				Headers: map[string]string{"trace-id": fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15), "content-type1": "application/json"},
				DedupId: fmt.Sprintf("%026d", i)})
		}
		idx := uint64(first/batch + 3)
		res := s.Begin(idx, 1, MaxLogVersion, int64(idx), NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "memory", Messages: msgs}}})
		if err := res.Batches[0].Err; err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// BenchmarkRestore is the restore of a snapshot of N messages of issue
// 24's shape (RAFTQ_RESTORE_BENCH_N, default 100,000): decoding, every
// index rebuilt, and the check Load ends with. It reports wall and CPU ns
// and allocations per message, and the heap the restored state holds.
// Run: go test -run '^$' -bench Restore -benchtime 3x ./fsm/state
func BenchmarkRestore(b *testing.B) {
	n := 100_000
	if v := os.Getenv("RAFTQ_RESTORE_BENCH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	var snap bytes.Buffer
	src := restoreBenchStore(b, n)
	if err := src.Freeze(src.AppliedIndex()).Stream(&snap); err != nil {
		b.Fatal(err)
	}
	src = nil
	runtime.GC()
	b.ResetTimer()
	b.ReportAllocs()
	var before, after runtime.MemStats
	var heap uint64
	var took, cpu time.Duration
	for range b.N {
		runtime.ReadMemStats(&before)
		start, cpu0 := time.Now(), processCPU(b)
		st, err := Load(bufio.NewReaderSize(bytes.NewReader(snap.Bytes()), 1<<20))
		took += time.Since(start)
		cpu += processCPU(b) - cpu0
		if err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		b.StopTimer()
		runtime.GC()
		var live runtime.MemStats
		runtime.ReadMemStats(&live)
		heap = live.HeapAlloc
		runtime.KeepAlive(st)
		st = nil
		runtime.GC()
		b.StartTimer()
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(n), "allocs/msg")
	}
	b.ReportMetric(float64(took.Nanoseconds())/float64(b.N)/float64(n), "ns/msg")
	// The process's CPU over the loads (every goroutine's, the GC's): on a
	// shared machine the wall time is also the wait for a core.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/msg")
	b.ReportMetric(float64(heap)/float64(n), "heap-B/msg")
	b.ReportMetric(float64(snap.Len())/float64(n), "snapshot-B/msg")
}

// TestRestoreIssue24Shape: a snapshot of messages of issue 24's shape (two
// headers and a dedup id each, at the newest cluster version, more than
// one batch of the decoder) loads into the state it was streamed from:
// the same digest, the same dedup expiry index, and a stream of the
// loaded state byte for byte the same.
func TestRestoreIssue24Shape(t *testing.T) {
	src := restoreBenchStore(t, 5*decodeBatchRecords+3)
	fr := src.Freeze(src.AppliedIndex())
	want, err := fr.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if err := fr.Stream(&snap); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(bufio.NewReader(bytes.NewReader(snap.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	lfr := loaded.Freeze(loaded.AppliedIndex())
	if got, _ := lfr.Digest(); got != want {
		t.Fatalf("loaded digest %s, streamed %s", got, want)
	}
	var again bytes.Buffer
	if err := lfr.Stream(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), snap.Bytes()) {
		t.Fatal("the loaded state streams other bytes than it was loaded from")
	}
	var a, b []dedupRef
	src.dedupExp.Ascend(func(r dedupRef) bool { a = append(a, r); return true })
	loaded.dedupExp.Ascend(func(r dedupRef) bool { b = append(b, r); return true })
	if len(a) != len(b) || len(a) != src.queues["memory"].dedup.Len() {
		t.Fatalf("dedup expiry index holds %d, want %d", len(b), len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("dedup expiry index differs at %d: %+v, want %+v", i, b[i], a[i])
		}
	}
}
