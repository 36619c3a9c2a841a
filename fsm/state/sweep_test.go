package state

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// twin applies every entry to two stores: one whose sweep is bounded by a
// small budget, one whose sweep does everything due (budget -1), both at
// log version SweepBudgetVersion.
type twin struct {
	t              *testing.T
	bounded, whole *Store
	index          uint64
	now            int64
}

func newTwin(t *testing.T, budget int) *twin {
	w := &twin{t: t, bounded: New(), whole: New(), now: 1000}
	w.bounded.sweepBudget, w.whole.sweepBudget = budget, -1
	w.bounded.entryBudget, w.whole.entryBudget = 1, -1
	w.apply(func(tx *Tx) string {
		return fmt.Sprint(tx.SetClusterVersion(&fsmv1.SetClusterVersion{Version: SweepBudgetVersion}).Err)
	})
	return w
}

// apply runs op as one entry on both stores and fails unless both answer
// alike; it returns the bounded store's answer.
func (w *twin) apply(op func(tx *Tx) string) string {
	w.t.Helper()
	w.index++
	var got [2]string
	for i, s := range []*Store{w.bounded, w.whole} {
		s.SetApplied(w.index)
		got[i] = op(s.Begin(w.index, 1, SweepBudgetVersion, w.now, NewTouched()))
		if err := s.Verify(); err != nil {
			w.t.Fatalf("entry %d: Verify: %v", w.index, err)
		}
	}
	if got[0] != got[1] {
		w.t.Fatalf("entry %d: the bounded sweep's store answered %s, the whole sweep's %s", w.index, got[0], got[1])
	}
	return got[0]
}

// applyTick applies a Tick entry (its sweep budget) to both stores.
func (w *twin) applyTick() {
	w.t.Helper()
	w.index++
	for _, s := range []*Store{w.bounded, w.whole} {
		s.SetApplied(w.index)
		s.BeginTick(w.index, 1, SweepBudgetVersion, w.now, NewTouched())
		if err := s.Verify(); err != nil {
			w.t.Fatalf("tick %d: Verify: %v", w.index, err)
		}
	}
}

// dueCount is how much time-driven work is due in s and not done, by index.
func dueCount(s *Store) (most int) {
	count := func(n int) { most = max(most, n) }
	n := 0
	s.delayed.Ascend(func(r timedRef) bool { n++; return r.at <= s.lastNow })
	count(n - 1)
	n = 0
	s.ttl.Ascend(func(r timedRef) bool { n++; return r.at <= s.lastNow })
	count(n - 1)
	n = 0
	s.dedupExp.Ascend(func(r dedupRef) bool { n++; return r.at <= s.lastNow })
	count(n - 1)
	n = 0
	s.recentExp.Ascend(func(r recentRef) bool { n++; return !within(r.at, s.lastNow) })
	count(n - 1)
	return most
}

// drain applies Ticks at the same instant until the bounded store has
// nothing due left, and fails if that takes more entries than the budget
// allows for what was due.
func (w *twin) drain(budget int) {
	w.t.Helper()
	due := dueCount(w.bounded)
	limit := (due+budget-1)/budget + 1
	ticks := 0
	for w.bounded.SweepPending() {
		if ticks++; ticks > limit {
			w.t.Fatalf("%d due (budget %d): still pending after %d ticks", due, budget, limit)
		}
		w.applyTick()
	}
	if dueCount(w.bounded) != 0 || w.whole.SweepPending() {
		w.t.Fatalf("SweepPending is false with %d due", dueCount(w.bounded))
	}
}

// fates describes everything the store holds except the order of
// fairness keys (which the moment a late message becomes ready may
// change, as any late arrival does): every queue's config and counters,
// every message record, dedup entry and recent outcome, the delete keys.
func fates(s *Store) string {
	var b strings.Builder
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		fmt.Fprintf(&b, "queue %s dlq=%v auto=%v cfg={%v} ready=%d delayed=%d inflight=%d dl=%d bytes=%d dedupBytes=%d totals=%d/%d/%d/%d\n",
			name, q.isDLQ, q.autoDLQ, q.raw, q.ready, q.delayed, q.inFlight, q.deadLettered, q.bytes, q.dedupBytes,
			q.enqueuedTotal, q.ackedTotal, q.nackedTotal, q.expiredTotal)
		rec := &fsmv1.MessageRecord{}
		q.msgs.Ascend(func(it msgItem) bool {
			fillMessageRecord(rec, it.m, nil)
			fmt.Fprintf(&b, "  msg {%v}\n", rec)
			return true
		})
		q.dedup.Ascend(func(e dedupEntry) bool {
			fmt.Fprintf(&b, "  dedup %s %d %d\n", e.dedupID, e.messageID, e.expiresMs)
			return true
		})
		q.recent.Ascend(func(e recentEntry) bool {
			fmt.Fprintf(&b, "  recent %+v\n", e)
			return true
		})
	}
	s.deleted.Ascend(func(d deletedKey) bool {
		fmt.Fprintf(&b, "deleted %+v\n", d)
		return true
	})
	fmt.Fprintf(&b, "bytes %d %d %d now %d\n", s.totalBytes, s.dedupBytes, s.recentBytes, s.lastNow)
	return b.String()
}

// TestBoundedSweepDoesEverythingOnce: with the sweep bounded to a few
// items per entry (log version 13), a random workload (bursts of delays,
// TTLs and dedup ids coming due together; grants, settles, purges,
// redrives, deletes and creates while a backlog is due) gets, entry for
// entry, the answers a store that sweeps everything gets; once Ticks
// drain the backlog (within the budget's count of entries) both hold the
// same messages in the same states, dead-lettered for the same reasons,
// with the same counters, dedup entries and outcomes: nothing due was
// skipped, done twice or done early, and nothing acted as if it had not
// come due.
func TestBoundedSweepDoesEverythingOnce(t *testing.T) {
	seeds := 16
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			budget := 1 + seed%4
			w := newTwin(t, budget)
			r := rand.New(rand.NewPCG(uint64(seed), 12))
			queues := []string{"a", "b", "shared"}
			pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
			key := func() string { return pick("", "", "k1", "k2") }
			var leases []*fsmv1.Ref
			for _, q := range queues {
				w.apply(func(tx *Tx) string { return fmt.Sprint(tx.CreateQueue(&fsmv1.CreateQueue{Name: q}).Err) })
			}
			drains := 0
			for step := 0; step < 500; step++ {
				w.now += int64(r.IntN(40))
				if r.IntN(25) == 0 {
					w.now += 400 // many things come due at once
				}
				if r.IntN(150) == 0 {
					w.now += RecentWindowMs // and the recent outcomes lapse
				}
				var op func(tx *Tx) string
				switch n := r.IntN(100); {
				case n < 4:
					cfg := &fsmv1.QueueConfig{MessageTtlMs: int64(r.IntN(2) * 300), DedupWindowMs: int64(50 + r.IntN(400)), MaxDeliveries: int32(1 + r.IntN(3))}
					if r.IntN(3) == 0 {
						cfg.DeadLetterQueue = pick("shared", "b")
					}
					name := pick(queues...)
					op = func(tx *Tx) string {
						return fmt.Sprint(tx.CreateQueue(&fsmv1.CreateQueue{Name: name, Config: cfg}).Err)
					}
				case n < 7:
					name, k := pick(queues...), key()
					op = func(tx *Tx) string {
						return fmt.Sprint(tx.DeleteQueue(&fsmv1.DeleteQueue{Name: name, IdempotencyKey: k}).Err)
					}
				case n < 10:
					name, k := pick(queues...), key()
					op = func(tx *Tx) string {
						res := tx.PurgeQueue(&fsmv1.PurgeQueue{Name: name, IdempotencyKey: k})
						return fmt.Sprint(res.Count, res.Err)
					}
				case n < 13:
					name, k, limit := pick(queues...), key(), int64(r.IntN(3))
					op = func(tx *Tx) string {
						res := tx.Redrive(&fsmv1.Redrive{Queue: name, Limit: limit, IdempotencyKey: k})
						return fmt.Sprint(res.Count, res.Err)
					}
				case n < 45:
					var batches []*fsmv1.EnqueueBatch
					burst := r.IntN(6) == 0
					delay, ttl := int64(r.IntN(200)), int64(50+r.IntN(300))
					for range 1 + r.IntN(2) {
						var msgs []*fsmv1.EnqueueMessage
						for range 1 + r.IntN(4) + 20*btoi(burst) {
							m := &fsmv1.EnqueueMessage{Payload: []byte("p"), Priority: int32(r.IntN(2)), FairnessKey: pick("", "f1", "f2")}
							if burst || r.IntN(3) == 0 {
								m.DelayMs = delay
							}
							if burst && r.IntN(2) == 0 || r.IntN(4) == 0 {
								m.TtlMs = ttl
							}
							if r.IntN(2) == 0 {
								m.DedupId = fmt.Sprint("d", r.IntN(40))
							}
							msgs = append(msgs, m)
						}
						batches = append(batches, &fsmv1.EnqueueBatch{Queue: pick(queues...), Messages: msgs})
					}
					op = func(tx *Tx) string {
						res := tx.Enqueue(&fsmv1.Enqueue{Batches: batches})
						var out []string
						for _, b := range res.Batches {
							out = append(out, fmt.Sprint(b.IDs, b.Err))
						}
						return fmt.Sprint(out, res.Err)
					}
				case n < 65:
					// What the bounded store would deliver now (its
					// scheduler's view), granted on both.
					q := pick(queues...)
					ds, _ := w.bounded.View().Peek(q, 1+r.IntN(4), false)
					var gs []*fsmv1.Grant
					for _, d := range ds {
						gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: d.ID, ConsumerId: pick("c0", "c1"), DeadlineMs: w.now + int64(r.IntN(300)), LeaseToken: r.Uint64() | 1})
					}
					op = func(tx *Tx) string {
						res := tx.Grant(&fsmv1.LeaseGrant{Grants: gs})
						for i, d := range res.Deliveries {
							if d != nil && tx.s == w.bounded {
								leases = append(leases, &fsmv1.Ref{Queue: gs[i].Queue, MessageId: d.ID, LeaseToken: d.LeaseToken})
							}
						}
						return fmt.Sprint(res.Items, res.Err)
					}
				case n < 90 && len(leases) > 0:
					i := r.IntN(len(leases))
					ref := leases[i]
					if r.IntN(4) != 0 {
						leases = append(leases[:i], leases[i+1:]...)
					}
					refs := []*fsmv1.Ref{ref}
					switch r.IntN(5) {
					case 0, 1:
						op = func(tx *Tx) string { return fmt.Sprint(tx.Ack(refs).Items) }
					case 2:
						delay, dl := int64(r.IntN(100)), r.IntN(5) == 0
						op = func(tx *Tx) string {
							return fmt.Sprint(tx.Nack(&fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref, DelayMs: delay, DeadLetter: dl}}}).Items)
						}
					case 3:
						op = func(tx *Tx) string { return fmt.Sprint(tx.Expire(&fsmv1.LeaseExpire{Refs: refs}).Items) }
					default:
						op = func(tx *Tx) string { return fmt.Sprint(tx.Rollback(refs).Items) }
					}
				case n < 93:
					c := pick("c0", "c1")
					op = func(tx *Tx) string {
						return fmt.Sprint(tx.ReleaseConsumer(&fsmv1.ReleaseConsumer{ConsumerId: c}).Count)
					}
				default:
					op = nil
				}
				if op == nil {
					w.applyTick()
				} else {
					w.apply(op)
				}
				if r.IntN(40) == 0 {
					drains++
					w.drain(budget)
					if a, b := fates(w.bounded), fates(w.whole); a != b {
						t.Fatalf("step %d: after draining, the stores differ:\nbounded:\n%s\nwhole:\n%s", step, a, b)
					}
				}
			}
			w.drain(budget)
			if a, b := fates(w.bounded), fates(w.whole); a != b {
				t.Fatalf("at the end the stores differ:\nbounded:\n%s\nwhole:\n%s", a, b)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
