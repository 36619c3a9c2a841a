package raftlog

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs appends batches of entries to each log store as a
// node opens it (bolt with the node's options; the wal), fsync on: the
// disk part of every commit. Batches of 1 are what a lone unary call
// costs; 64 and 512 what group commit gives under load (512 is
// maxAppendEntries). Reported: ns per batch and per entry, and the fsync
// share as the timing wrapper sees it.
func BenchmarkStoreLogs(b *testing.B) {
	for _, kind := range []LogStore{LogStoreBolt, LogStoreWAL} {
		for _, batch := range []int{1, 16, 64, 512} {
			for _, size := range []int{100, 1024} {
				b.Run(fmt.Sprintf("store=%s/batch=%d/entry=%dB", kind, batch, size), func(b *testing.B) {
					benchStoreLogs(b, kind, batch, size)
				})
			}
		}
	}
}

func benchStoreLogs(b *testing.B, kind LogStore, batch, size int) {
	dir := b.TempDir()
	l, err := Open(dir, kind, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	timed := NewTimed(l.Store, l.DiskTime)
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	logs := make([]*raft.Log, batch)
	for i := range logs {
		logs[i] = &raft.Log{Type: raft.LogCommand, Term: 1, Data: payload}
	}
	next := uint64(1)
	b.SetBytes(int64(batch * size))
	b.ResetTimer()
	for range b.N {
		for _, e := range logs {
			e.Index = next
			next++
		}
		if err := timed.StoreLogs(logs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	st := timed.Stats()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/entry")
	if st.Append.Sum > 0 {
		b.ReportMetric(st.Fsync.Sum/st.Append.Sum, "disk-share")
	}
}
