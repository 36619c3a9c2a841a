package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

const benchPicks = 256

// benchState is a queue of 100,000 ready messages spread over keys
// fairness keys (round-robin, so every key is backlogged).
func benchState(b *testing.B, keys int) *fsm.FSM {
	b.Helper()
	f := fsm.New(fsm.Options{Logger: discard})
	idx := uint64(0)
	apply := func(cmd *fsmv1.Command) {
		idx++
		if res := f.ApplyCommand(idx, cmd); res.Failure() != nil {
			b.Fatal(res.Failure())
		}
	}
	apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q"}}})
	const total = 100_000
	for i := 0; i < total; i += 10_000 {
		msgs := make([]*fsmv1.EnqueueMessage, 10_000)
		for j := range msgs {
			msgs[j] = &fsmv1.EnqueueMessage{FairnessKey: fmt.Sprintf("k%d", (i+j)%keys), Weight: uint32(1 + (i+j)%3)}
		}
		apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}})
	}
	return f
}

// BenchmarkSelect measures one scheduling decision of benchPicks messages
// (DRR over the keys, pending and throttle checks, round-robin over 4
// consumers, building the grants) against a plain FIFO walk that only
// builds the grants. ns/msg is comparable across sub-benchmarks.
func BenchmarkSelect(b *testing.B) {
	for _, keys := range []int{1, 100, 10_000} {
		b.Run(fmt.Sprintf("drr/keys=%d", keys), func(b *testing.B) {
			f := benchState(b, keys)
			s := New(Config{Logger: discard, MaxGrantBatch: 1 << 30}, f.Reader(), nil)
			t := s.newTerm(context.Background(), 1, time.UnixMilli(1_700_000_000_000))
			for i := range 4 {
				if err := t.reg.add(&Consumer{id: fmt.Sprintf("c%d", i), queue: "q", seq: uint64(i + 1), max: 1 << 30}); err != nil {
					b.Fatal(err)
				}
			}
			ps := &passState{now: t.anchor, nowMs: t.anchor.UnixMilli(), anchor: t.anchor}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f.Reader().Read(func(v fsm.View) {
					qv, _ := v.Queue("q")
					if n := t.selectQueue(v, qv, "q", ps, benchPicks); n != benchPicks {
						b.Fatalf("picked %d", n)
					}
				})
				t.pipe.batch, t.pipe.batchTo = t.pipe.batch[:0], t.pipe.batchTo[:0]
				clear(t.pipe.pending["q"])
				for _, c := range t.reg.queues["q"] {
					c.pending = 0
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchPicks), "ns/msg")
		})
	}
	b.Run("fifo-baseline", func(b *testing.B) {
		f := benchState(b, 1)
		batch := make([]*fsmv1.Grant, 0, benchPicks)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			f.Reader().Read(func(v fsm.View) {
				qv, _ := v.Queue("q")
				after := uint64(0)
				for range benchPicks {
					m, ok := qv.NextReady(0, "k0", after)
					if !ok {
						b.Fatal("ran out")
					}
					after = m.ID
					batch = append(batch, &fsmv1.Grant{Queue: "q", MessageId: m.ID, ConsumerId: "c0", DeadlineMs: 1})
				}
			})
			batch = batch[:0]
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchPicks), "ns/msg")
	})
}

// BenchmarkThrottledPass measures one scheduling pass over a queue whose
// every fairness key is throttled (issue 11, item 3): keys × perKey ready
// messages, each key's messages under a throttle key of its own whose
// bucket is empty, so the pass picks nothing. Its cost is what Apply waits
// for behind the state's read lock at every pass.
func BenchmarkThrottledPass(b *testing.B) {
	for _, tc := range []struct{ keys, perKey int }{{200, 1_100}, {10_000, 100}} {
		b.Run(fmt.Sprintf("keys=%d/msgs=%d", tc.keys, tc.perKey), func(b *testing.B) {
			f := fsm.New(fsm.Options{Logger: discard})
			idx := uint64(0)
			apply := func(cmd *fsmv1.Command) {
				idx++
				if res := f.ApplyCommand(idx, cmd); res.Failure() != nil {
					b.Fatal(res.Failure())
				}
			}
			rules := map[string]*fsmv1.ThrottleRule{}
			for k := range tc.keys {
				rules[fmt.Sprint("t", k)] = &fsmv1.ThrottleRule{RatePerSec: 1e-6}
			}
			apply(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q", Config: &fsmv1.QueueConfig{Throttles: rules}}}})
			total := tc.keys * tc.perKey
			for i := 0; i < total; i += 10_000 {
				msgs := make([]*fsmv1.EnqueueMessage, min(10_000, total-i))
				for j := range msgs {
					k := (i + j) % tc.keys
					msgs[j] = &fsmv1.EnqueueMessage{Payload: make([]byte, 100), FairnessKey: fmt.Sprint("k", k), ThrottleKeys: []string{fmt.Sprint("t", k)}}
				}
				apply(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}})
			}
			s := New(Config{Logger: discard, MaxGrantBatch: 1 << 30}, f.Reader(), nil)
			t := s.newTerm(context.Background(), 1, time.UnixMilli(1_700_000_000_000))
			if err := t.reg.add(&Consumer{id: "c", queue: "q", seq: 1, max: 1 << 30}); err != nil {
				b.Fatal(err)
			}
			ps := &passState{now: t.anchor, nowMs: t.anchor.UnixMilli(), anchor: t.anchor}
			// The first pass spends each key's one token.
			f.Reader().Read(func(v fsm.View) {
				qv, _ := v.Queue("q")
				if n := t.selectQueue(v, qv, "q", ps, 1<<30); n != tc.keys {
					b.Fatalf("first pass picked %d, want one per key", n)
				}
			})
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f.Reader().Read(func(v fsm.View) {
					qv, _ := v.Queue("q")
					if n := t.selectQueue(v, qv, "q", ps, 1<<30); n != 0 {
						b.Fatalf("picked %d from throttled keys", n)
					}
				})
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pass")
		})
	}
}
