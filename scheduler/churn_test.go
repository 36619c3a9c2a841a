package scheduler

import (
	"context"
	"fmt"
	"github.com/raftq/raftq/fsm/state"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestRoundRobinAcrossChurn: consumers join and leave between phases; in
// every phase the consumers present get equal shares within ±1, whether
// messages come in one batch or one by one (the cursor survives passes).
func TestRoundRobinAcrossChurn(t *testing.T) {
	type phase struct {
		join, leave int // consumers to add / remove (oldest first) before the phase
		msgs        int
		oneByOne    bool
	}
	for _, tc := range []struct {
		name   string
		phases []phase
	}{
		{"batches", []phase{{join: 2, msgs: 11}, {join: 1, msgs: 10}, {leave: 1, msgs: 7}, {join: 3, leave: 2, msgs: 100}, {leave: 2, msgs: 1}}},
		{"one by one", []phase{{join: 2, msgs: 11, oneByOne: true}, {join: 1, msgs: 10, oneByOne: true}, {leave: 1, msgs: 7, oneByOne: true}, {join: 3, msgs: 25, oneByOne: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t)
				e.createQueue("q", nil)
				var cs []*Consumer
				for pi, ph := range tc.phases {
					for range ph.join {
						cs = append(cs, e.register("q", 1000))
					}
					for range ph.leave {
						cs[0].Close()
						cs = cs[1:]
					}
					if ph.oneByOne {
						for range ph.msgs {
							e.enqueueN("q", 1, nil)
						}
					} else {
						e.enqueueN("q", ph.msgs, nil)
					}
					lo, hi, sum := 1<<30, 0, 0
					for _, c := range cs {
						got := e.drain(c)
						lo, hi, sum = min(lo, len(got)), max(hi, len(got)), sum+len(got)
						if len(got) > 0 {
							e.ack(got...)
						}
					}
					if sum != ph.msgs || hi-lo > 1 {
						t.Fatalf("phase %d: %d consumers got %d..%d (sum %d of %d)", pi, len(cs), lo, hi, sum, ph.msgs)
					}
				}
			})
		})
	}
}

// TestRoundRobinSkipsConsumersWithoutCredit: a full consumer is passed
// over; the others keep even shares.
func TestRoundRobinSkipsConsumersWithoutCredit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		small := e.register("q", 2)
		a, b := e.register("q", 100), e.register("q", 100)
		e.enqueueN("q", 42, nil)
		if s, x, y := len(e.drain(small)), len(e.drain(a)), len(e.drain(b)); s != 2 || x != 20 || y != 20 {
			t.Fatalf("shares %d/%d/%d, want 2/20/20", s, x, y)
		}
	})
}

// TestStress: several consumers ack, nack and close concurrently while
// grants fail now and then and proposals race. Every message ends acked
// exactly once, no message is held twice, nothing leaks.
func TestStress(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const total = 3000
		e := newEnv(t, func(c *Config) { c.MaxGrantBatch = 16; c.MaxInFlightGrants = 3 })
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 24 * 3600 * 1000, MaxDeliveries: 1000})
		var failN atomic.Int64
		e.p.setHook(func(ctx context.Context, cmd *fsmv1.Command) error {
			if _, ok := cmd.Op.(*fsmv1.Command_LeaseGrant); ok && failN.Add(1)%7 == 0 {
				return errInjected
			}
			return nil
		})
		for i := 0; i < total; i += 500 {
			var msgs []*fsmv1.EnqueueMessage
			for j := range 500 {
				msgs = append(msgs, &fsmv1.EnqueueMessage{FairnessKey: fmt.Sprintf("k%d", (i+j)%13), Priority: int32(j % 3)})
			}
			e.enqueue("q", msgs...)
		}

		var (
			mu     sync.Mutex
			acked  = map[uint64]bool{}
			holder = map[uint64]string{} // message -> consumer currently pushed to
		)
		var ackedN atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		worker := func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, seed))
			for ctx.Err() == nil {
				c, err := e.s.Register(ctx, ConsumerRequest{Queue: "q", MaxInFlight: 1 + r.IntN(20)})
				if err != nil {
					t.Errorf("register: %v", err)
					return
				}
				for n := 50 + r.IntN(200); n > 0 && ctx.Err() == nil; n-- {
					d, ok := c.TakeOne()
					if !ok {
						select {
						case <-c.Ready():
						case <-ctx.Done():
						}
						n++ // nothing taken
						continue
					}
					mu.Lock()
					if h, ok := holder[d.ID]; ok && h != c.ID() {
						t.Errorf("message %d pushed to %s while %s holds it", d.ID, c.ID(), h)
					}
					if acked[d.ID] {
						t.Errorf("acked message %d delivered again", d.ID)
					}
					holder[d.ID] = c.ID()
					mu.Unlock()
					ref := ref(t, d)
					var cmd *fsmv1.Command
					nack := r.IntN(10) == 0
					if nack {
						cmd = &fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref}}}}}
					} else {
						cmd = &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: []*fsmv1.Ref{ref}}}}
					}
					mu.Lock()
					delete(holder, d.ID)
					mu.Unlock()
					cmd.NowMs = time.Now().UnixMilli()
					settled := func() {}
					if !nack { // as transport does: an ack frees credit before it applies
						settled = e.s.Settling([]*fsmv1.Ref{ref})
					}
					res, err := fsm.As[*fsm.ItemsResult](e.p.Propose(context.Background(), cmd))
					settled()
					if err != nil || res.Items[0] != nil {
						t.Errorf("ack/nack %d: %v %v", d.ID, err, res)
						continue
					}
					if !nack {
						mu.Lock()
						acked[d.ID] = true
						mu.Unlock()
						ackedN.Add(1)
					}
				}
				// Close with deliveries possibly still buffered: released.
				mu.Lock()
				c.Take(func(d *state.Delivery) bool {
					delete(holder, d.ID)
					return true
				})
				mu.Unlock()
				c.Close()
			}
		}
		for i := range 4 {
			wg.Add(1)
			go worker(uint64(i + 1))
		}
		// An observer reads what transport reads while passes run, so the
		// race detector sees the registry, policy and pipeline locks at work.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if keys, _ := e.s.KeyStats("q"); len(keys) == 0 && ackedN.Load() < total/2 {
					t.Errorf("KeyStats shows no fairness keys with %d of %d acked", ackedN.Load(), total)
				}
				if n := e.s.Consumers("q"); n > 4 {
					t.Errorf("%d consumers registered, at most 4 exist at once", n)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		// Failed grants back off on the fake clock: keep time moving.
		for start := time.Now(); ackedN.Load() != total; {
			if time.Since(start) > waitTimeout {
				t.Fatalf("%d of %d acked after %v", ackedN.Load(), total, waitTimeout)
			}
			e.advance(5 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		e.idle()
		if len(acked) != total {
			t.Fatalf("%d acked, want %d", len(acked), total)
		}
		if st := e.info("q").Stats; st.Ready+st.InFlight+st.Delayed != 0 || st.AckedTotal != total {
			t.Fatalf("stats %+v", st)
		}
		e.f.Reader().Read(func(v fsm.View) {
			tm := e.term
			tm.pipe.mu.Lock()
			defer tm.pipe.mu.Unlock()
			tm.reg.mu.Lock()
			defer tm.reg.mu.Unlock()
			for q, pend := range tm.pipe.pending {
				if len(pend) != 0 {
					t.Errorf("pending marks left on %s: %d", q, len(pend))
				}
			}
			for _, cs := range tm.reg.queues {
				for _, c := range cs {
					if c.pending != 0 || v.LeasesHeld(c.id) != 0 {
						t.Errorf("%s: pending %d, held %d", c.id, c.pending, v.LeasesHeld(c.id))
					}
				}
			}
		})
		if err := e.f.Integrity().Verify(); err != nil {
			t.Fatal(err)
		}
		t.Logf("grants %d (failed %d), rollbacks %d, releases %d", e.p.proposed("grant"), failN.Load()/7, e.p.proposed("rollback"), e.p.proposed("release"))
	})
}
