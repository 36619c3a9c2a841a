package state

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// BenchmarkMessageCost measures what stored messages take on the heap
// against what the state counts for them (MessageCost, dedupCost), for a
// few shapes of message: heap/counted is the factor between
// max_queued_bytes and the memory the messages take (docs/operations.md).
// heap-B/msg is the heap one stored message takes (issue 15: memory per
// message); the "+dedup" shapes carry a 26-character dedup id, as the Go
// SDK gives every message. Run with -benchtime=1x; it reports, it does not
// time.
func BenchmarkMessageCost(b *testing.B) {
	shapes := []struct {
		name string
		msg  func(i int) *fsmv1.EnqueueMessage
	}{
		{"empty", func(int) *fsmv1.EnqueueMessage { return &fsmv1.EnqueueMessage{} }},
		{"100B", func(int) *fsmv1.EnqueueMessage { return &fsmv1.EnqueueMessage{Payload: make([]byte, 100)} }},
		{"100B+dedup", func(i int) *fsmv1.EnqueueMessage {
			return &fsmv1.EnqueueMessage{Payload: make([]byte, 100), DedupId: fmt.Sprintf("%026d", i)}
		}},
		{"1KiB+dedup", func(i int) *fsmv1.EnqueueMessage {
			return &fsmv1.EnqueueMessage{Payload: make([]byte, 1024), DedupId: fmt.Sprintf("%026d", i)}
		}},
		{"1KiB+keys+dedup", func(i int) *fsmv1.EnqueueMessage {
			return &fsmv1.EnqueueMessage{Payload: make([]byte, 1024), Headers: map[string]string{"trace": "0123456789abcdef", "kind": "job"},
				FairnessKey: fmt.Sprint("tenant-", i%100), ThrottleKeys: []string{"api"}, DedupId: fmt.Sprintf("%016x", i)}
		}},
		{"1KiB+2headers+dedup", func(i int) *fsmv1.EnqueueMessage { // issue 24's shape
			return &fsmv1.EnqueueMessage{Payload: make([]byte, 1024), Headers: map[string]string{"trace-id": fmt.Sprintf("%016x", i), "content-type1": "application/json"},
				DedupId: fmt.Sprintf("%026d", i)}
		}},
		{"16KiB-headers", func(int) *fsmv1.EnqueueMessage {
			h := map[string]string{}
			for j := range 16 {
				h[fmt.Sprintf("h%02d", j)] = strings.Repeat("x", 1021)
			}
			return &fsmv1.EnqueueMessage{Headers: h}
		}},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			n, batch := 20_000, 500
			if sh.name == "16KiB-headers" {
				n = 4_000
			}
			var ratio, perMsg float64
			for range b.N {
				s := New()
				s.clusterVersion = AdmitVersion
				s.Begin(1, 1, AdmitVersion, 1, NewTouched()).CreateQueue(&fsmv1.CreateQueue{Name: "q"})
				// Messages are built first: a follower's decoded entry is
				// what the state keeps, so they count; the entry's own
				// slice does not.
				batches := make([][]*fsmv1.EnqueueMessage, n/batch)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for bi := range batches {
					for i := range batch {
						batches[bi] = append(batches[bi], sh.msg(bi*batch+i))
					}
				}
				for bi, msgs := range batches {
					res := s.Begin(uint64(bi+2), 1, AdmitVersion, 1, NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}})
					if res.Batches[0].Err != nil {
						b.Fatal(res.Batches[0].Err)
					}
				}
				batches = nil
				runtime.GC()
				runtime.ReadMemStats(&after)
				ratio = float64(after.HeapAlloc-before.HeapAlloc) / float64(s.held())
				perMsg = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
				runtime.KeepAlive(s)
			}
			b.ReportMetric(ratio, "heap/counted")
			b.ReportMetric(perMsg, "heap-B/msg")
		})
	}
}
