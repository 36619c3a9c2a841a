package fsm

import (
	"fmt"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestSweepIsBoundedFromVersion13 (issue 20, hole 6): thousands of
// delayed messages, TTLs and dedup entries coming due at one instant are
// all swept by the one entry that finds them due under log version 12, as
// before; from version 13 a client's entry moves at most
// state.EntrySweepBudget of each and a Tick state.SweepBudget, oldest
// first, SweepPending says so until the last, and the rest follow in the
// next entries.
func TestSweepIsBoundedFromVersion13(t *testing.T) {
	const n = 3*state.SweepBudget + 100
	for _, v := range []uint32{SweepBudgetVersion - 1, SweepBudgetVersion} {
		t.Run(fmtVersion(v), func(t *testing.T) {
			h := newHarness(t)
			h.raise(v)
			h.create("delayed", &fsmv1.QueueConfig{DedupWindowMs: 1000})
			h.create("ttl", nil)
			var delayed, ttl []*fsmv1.EnqueueMessage
			for i := range n {
				delayed = append(delayed, &fsmv1.EnqueueMessage{Payload: []byte("d"), DelayMs: 1000, DedupId: fmt.Sprint(i)})
				ttl = append(ttl, &fsmv1.EnqueueMessage{Payload: []byte("t"), TtlMs: 1000})
			}
			h.enqueue("delayed", delayed...)
			h.enqueue("ttl", ttl...)
			h.create("other", nil)
			h.now += 1000
			h.enqueuePayloads("other", "x") // a client's entry: a small budget
			pending := func() (p bool) {
				h.f.Reader().Read(func(v View) { p = v.SweepPending() })
				return p
			}
			for tick := 1; ; tick++ {
				h.tick()
				d, x := h.info("delayed").Stats, h.info("ttl").Stats
				want := int64(min(state.EntrySweepBudget+tick*state.SweepBudget, n))
				if v < SweepBudgetVersion {
					want = n
				}
				if d.Ready != want || d.Delayed != n-want || x.Ready != n-want || h.info("ttl.dlq").Stats.Ready != want || d.DedupEntries != n-want {
					t.Fatalf("after tick %d: %d ready and %d delayed, %d past their TTL, %d dedup entries left; want %d moved of %d each",
						tick, d.Ready, d.Delayed, h.info("ttl.dlq").Stats.Ready, d.DedupEntries, want, n)
				}
				if p := pending(); p != (want < n) {
					t.Fatalf("after tick %d: SweepPending %v with %d of %d moved", tick, p, want, n)
				}
				if want == n {
					break
				}
			}
		})
	}
}
