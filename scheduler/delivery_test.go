package scheduler

import (
	"context"
	"errors"
	"fmt"
	"github.com/raftq/raftq/fsm/state"
	"slices"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func TestImmediateDeliveryCreatesLease(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		c := e.register("q", 0)
		if c.MaxInFlight() != DefaultMaxInFlight {
			t.Fatalf("max in flight %d; want %d", c.MaxInFlight(), DefaultMaxInFlight)
		}
		ids := e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("hello")})
		d := e.recv(c) // no clock advance: pushed as soon as the enqueue applied
		if d.ID != ids[0] || string(d.Payload) != "hello" || d.Attempt != 1 || d.LeaseToken == 0 {
			t.Fatalf("delivery %+v", d)
		}
		if want := time.Now().UnixMilli() + fsm.DefaultVisibilityTimeoutMs; d.LeaseDeadlineMs != want {
			t.Fatalf("deadline %d, want %d", d.LeaseDeadlineMs, want)
		}
		if n := e.leasesHeld(c.ID()); n != 1 {
			t.Fatalf("LeasesHeld = %d, want 1", n)
		}
		if st := e.info("q").Stats; st.InFlight != 1 || st.Ready != 0 {
			t.Fatalf("stats %+v", st)
		}
		if got := e.s.Consumers("q"); got != 1 {
			t.Fatalf("Consumers = %d", got)
		}
		e.ack(d)
		e.idle()
		if n := e.leasesHeld(c.ID()); n != 0 {
			t.Fatalf("LeasesHeld after ack = %d", n)
		}
	})
}

func TestConsumerVisibilityOverride(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 60_000})
		c, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "q", MaxInFlight: 1, VisibilityTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e.enqueueN("q", 1, nil)
		if d := e.recv(c); d.LeaseDeadlineMs != time.Now().UnixMilli()+2000 {
			t.Fatalf("deadline %d", d.LeaseDeadlineMs)
		}
	})
}

func TestLateConsumerDrainsBacklog(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		ids := e.enqueueN("q", 300, nil)
		e.idle()
		c := e.register("q", 1000)
		got := e.recvN(c, 300)
		for i, d := range got {
			if d.ID != ids[i] {
				t.Fatalf("delivery %d is %d, want %d", i, d.ID, ids[i])
			}
		}
		e.expectNone(c)
	})
}

// TestFIFO: deliveries reach a consumer in enqueue order, whether they
// were backlogged or arrived one by one with several grants pipelined.
// With one grant in flight the leases themselves are granted in order too
// (pipelined proposals may commit in either order; pushes never reorder).
func TestFIFO(t *testing.T) {
	for _, tc := range []struct {
		name       string
		registered bool // consumer present while messages arrive one by one
		inFlight   int
	}{
		{"backlog", false, 0},
		{"one by one pipelined", true, 0},
		{"one by one serial", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t, func(c *Config) { c.MaxInFlightGrants = tc.inFlight })
				e.createQueue("q", nil)
				var c *Consumer
				if tc.registered {
					c = e.register("q", 100)
				}
				var ids []uint64
				for i := range 10 {
					ids = append(ids, e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte{byte(i)}})...)
				}
				if c == nil {
					c = e.register("q", 100)
				}
				var lastTok uint64
				for i, d := range e.recvN(c, 10) {
					if d.ID != ids[i] {
						t.Fatalf("delivery %d is %d, want %d", i, d.ID, ids[i])
					}
					if tc.inFlight == 1 && d.LeaseToken <= lastTok {
						t.Fatalf("lease tokens out of order: %d after %d", d.LeaseToken, lastTok)
					}
					lastTok = d.LeaseToken
				}
			})
		})
	}
}

func TestConsumersGetDistinctEqualShares(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		cs := []*Consumer{e.register("q", 1000), e.register("q", 1000), e.register("q", 1000)}
		e.enqueueN("q", 300, nil)
		seen := map[uint64]string{}
		for _, c := range cs {
			got := e.drain(c)
			if len(got) != 100 {
				t.Errorf("%s got %d, want 100", c.ID(), len(got))
			}
			for _, d := range got {
				if other, dup := seen[d.ID]; dup {
					t.Fatalf("message %d delivered to %s and %s", d.ID, other, c.ID())
				}
				seen[d.ID] = c.ID()
			}
		}
		if len(seen) != 300 {
			t.Fatalf("%d distinct deliveries, want 300", len(seen))
		}
	})
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
	}{
		{"no grace", -1},
		{"grace longer than visibility", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t, func(c *Config) { c.LeaseGrace = tc.grace })
				e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
				c := e.register("q", 10)
				e.enqueueN("q", 1, nil)
				d1 := e.recv(c)
				if d1.Attempt != 1 {
					t.Fatalf("attempt %d", d1.Attempt)
				}
				e.advance(999 * time.Millisecond)
				e.expectNone(c)
				expireAt := time.Second
				if tc.grace > expireAt {
					e.advance(tc.grace - 999*time.Millisecond - time.Millisecond)
					e.expectNone(c) // past the deadline but inside the grace period
					if e.p.proposed("expire") != 0 {
						t.Fatal("expired a lease inside the grace period")
					}
					e.advance(time.Millisecond)
				} else {
					e.advance(time.Millisecond)
				}
				d2 := e.recv(c)
				if d2.ID != d1.ID || d2.Attempt != 2 || d2.LeaseToken == d1.LeaseToken {
					t.Fatalf("redelivery %+v after %+v", d2, d1)
				}
				if st := e.info("q").Stats; st.ExpiredTotal != 1 {
					t.Fatalf("expired_total %d", st.ExpiredTotal)
				}
			})
		})
	}
}

func TestPriorities(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		prios := []int32{0, 5, 1, -3, 5, 0, 1}
		var msgs []*fsmv1.EnqueueMessage
		for i := range 70 {
			msgs = append(msgs, &fsmv1.EnqueueMessage{Priority: prios[i%len(prios)]})
		}
		e.enqueue("q", msgs...)
		c := e.register("q", 1)
		last := int32(1 << 30)
		for range 70 {
			d := e.recv(c)
			if d.Priority > last {
				t.Fatalf("priority %d delivered after %d", d.Priority, last)
			}
			last = d.Priority
			e.ack(d)
		}
		// A higher priority arriving later jumps the queue.
		e.enqueueN("q", 5, &fsmv1.EnqueueMessage{Priority: 0})
		d := e.recv(c) // credit 1: one prio-0 message is out
		e.enqueueN("q", 1, &fsmv1.EnqueueMessage{Priority: 9})
		e.ack(d)
		if d := e.recv(c); d.Priority != 9 {
			t.Fatalf("got priority %d, want 9", d.Priority)
		}
	})
}

func TestDelayedNotEarly(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		c := e.register("q", 10)
		ids := e.enqueue("q", &fsmv1.EnqueueMessage{DelayMs: 5000}, &fsmv1.EnqueueMessage{DelayMs: 8000})
		e.advance(4999 * time.Millisecond)
		e.expectNone(c)
		e.advance(time.Millisecond)
		if d := e.recv(c); d.ID != ids[0] {
			t.Fatalf("got %d, want %d", d.ID, ids[0])
		}
		e.advance(2999 * time.Millisecond)
		e.expectNone(c)
		e.advance(time.Millisecond)
		if d := e.recv(c); d.ID != ids[1] {
			t.Fatalf("got %d, want %d", d.ID, ids[1])
		}
		if e.p.proposed("tick") < 1 {
			t.Fatal("no Tick proposed")
		}
	})
}

func TestTTLTicksToDLQWithoutConsumers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", &fsmv1.QueueConfig{MessageTtlMs: 1000})
		e.enqueueN("q", 3, nil)
		e.advance(time.Second)
		e.idle()
		if st := e.info("q").Stats; st.Ready != 0 || st.DeadLettered != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestCreditsNeverNegativeNorLeak acks in bursts and checks the accounting
// at every quiet point.
func TestCreditsNeverNegativeNorLeak(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		cs := []*Consumer{e.register("q", 5), e.register("q", 3)}
		e.enqueueN("q", 101, nil)
		total := 0
		for total < 101 {
			e.idle()
			var batch []*state.Delivery
			for _, c := range cs {
				held := e.leasesHeld(c.ID())
				pc, _ := e.pendingState(c)
				if pc < 0 || held > c.MaxInFlight() || c.MaxInFlight()-held-pc < 0 {
					t.Fatalf("%s: held %d pending %d of %d", c.ID(), held, pc, c.MaxInFlight())
				}
				got := e.drain(c)
				if len(got) != held {
					t.Fatalf("%s: %d buffered, %d held", c.ID(), len(got), held)
				}
				batch = append(batch, got...)
			}
			if len(batch) == 0 {
				t.Fatal("no progress")
			}
			total += len(batch)
			e.ack(batch...)
		}
		e.idle()
		for _, c := range cs {
			if held := e.leasesHeld(c.ID()); held != 0 {
				t.Fatalf("%s holds %d after all acks", c.ID(), held)
			}
			if pc, pq := e.pendingState(c); pc != 0 || pq != 0 {
				t.Fatalf("pending %d/%d after all acks", pc, pq)
			}
		}
		e.enqueueN("q", 8, nil)
		if a, b := len(e.drain(cs[0])), len(e.drain(cs[1])); a != 5 || b != 3 {
			t.Fatalf("full credit back: got %d and %d, want 5 and 3", a, b)
		}
	})
}

func TestGrantFailureBacksOffAndRetries(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		e.p.setHook(func(ctx context.Context, cmd *fsmv1.Command) error {
			if _, ok := cmd.Op.(*fsmv1.Command_LeaseGrant); ok {
				return errInjected
			}
			return nil
		})
		c := e.register("q", 10)
		e.enqueueN("q", 4, nil)
		e.idle()
		fails := e.p.proposed("grant")
		if fails != 0 || c.Buffered() != 0 {
			t.Fatalf("grants applied %d, buffered %d", fails, c.Buffered())
		}
		// No spinning: while backing off nothing is proposed until time passes.
		e.p.setHook(nil)
		e.advance(maxBackoff)
		if got := e.recvN(c, 4); len(got) != 4 {
			t.Fatal("not delivered after backoff")
		}
		if pc, pq := e.pendingState(c); pc != 0 || pq != 0 {
			t.Fatalf("pending %d/%d", pc, pq)
		}
	})
}

func TestKeyStats(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", &fsmv1.QueueConfig{Throttles: map[string]*fsmv1.ThrottleRule{
			"t": {RatePerSec: 10, Burst: 4}, "u": {RatePerSec: 1},
		}})
		e.enqueueN("q", 3, &fsmv1.EnqueueMessage{FairnessKey: "a", Weight: 2})
		e.enqueueN("q", 6, &fsmv1.EnqueueMessage{FairnessKey: "b", ThrottleKeys: []string{"t"}})
		c := e.register("q", 3)
		e.idle()
		keys, thr := e.s.KeyStats("q")
		var names []string
		for _, k := range keys {
			names = append(names, k.Key)
		}
		if !slices.Equal(names, []string{"a", "b"}) || keys[0].Weight != 2 {
			t.Fatalf("keys %v", keys)
		}
		if keys[0].Pending+keys[1].Pending != 9-int64(c.Buffered()) {
			t.Fatalf("pending %d+%d", keys[0].Pending, keys[1].Pending)
		}
		if len(thr) != 2 || thr[0].Key != "t" || thr[0].Burst != 4 || thr[1].Key != "u" || thr[1].Tokens != 1 {
			t.Fatalf("throttles %v", thr)
		}
		if thr[0].Tokens != 3 { // DRR a,a,b: one token of t spent
			t.Fatalf("tokens of t: %v", thr[0].Tokens)
		}
	})
}

// TestLimitStopsGranting: a consumer that asked for N deliveries gets N,
// even as its acks return credit, and ends (ErrLimitReached, which its
// stream reports as OK) once it holds none of them any more.
func TestLimitStopsGranting(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		e.enqueueN("q", 10, nil)
		c, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "q", MaxInFlight: 2, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		e.ack(e.recvN(c, 2)...)
		last := e.recv(c)
		e.idle()
		if err := c.Err(); err != nil {
			t.Fatalf("ended with its last delivery still leased: %v", err)
		}
		e.ack(last)
		e.idle()
		e.expectNone(c)
		if !errors.Is(c.Err(), ErrLimitReached) {
			t.Fatalf("after its limit was settled: Err = %v, want ErrLimitReached", c.Err())
		}
		if got := e.info("q").Stats.Ready; got != 7 {
			t.Fatalf("ready = %d, want 7", got)
		}
		if e.s.Consumers("q") != 0 || e.p.proposed("release") != 0 {
			t.Fatalf("consumers %d, releases %d", e.s.Consumers("q"), e.p.proposed("release"))
		}
	})
}

// TestLapsedDeliveryDoesNotCountAgainstLimit: a delivery that lapsed in the
// buffer was never sent, so a consumer that wants one message still gets
// one (and is not ended with nothing).
func TestLapsedDeliveryDoesNotCountAgainstLimit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LeaseGrace = -1 })
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
		ids := e.enqueueN("q", 2, nil)
		c, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "q", MaxInFlight: 1, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		e.idle()
		e.advance(time.Second) // its one delivery lapses in the buffer
		d := e.recv(c)
		if d.ID != ids[0] || d.Attempt != 1 {
			t.Fatalf("delivery %+v, want message %d at attempt 1", d, ids[0])
		}
		e.ack(d)
		e.idle()
		if !errors.Is(c.Err(), ErrLimitReached) {
			t.Fatalf("Err = %v", c.Err())
		}
	})
}

// TestTicksUntilNothingIsDue (issue 20, hole 6): from log version 13 an
// entry moves at most state.SweepBudget delayed messages, so a Tick at the
// instant they come due leaves the rest due; the sweeper keeps proposing
// Ticks until none is left (it used to propose one per due instant, and
// the rest would wait for some other entry), also for dedup entries,
// which no NextDue announces.
func TestTicksUntilNothingIsDue(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.raise(fsm.MaxLogVersion)
		const n = 3*state.SweepBudget + 7
		e.createQueue("q", &fsmv1.QueueConfig{DedupWindowMs: 1000})
		// Twice as many dedup entries as delays: the last ticks lapse
		// dedup entries only and touch no queue.
		msgs := make([]*fsmv1.EnqueueMessage, 2*n)
		for i := range msgs {
			msgs[i] = &fsmv1.EnqueueMessage{DedupId: fmt.Sprint(i)}
			if i < n {
				msgs[i].DelayMs = 1000
			}
		}
		e.enqueue("q", msgs...)
		e.advance(time.Second)
		e.idle()
		if st := e.info("q").Stats; st.Ready != 2*n || st.Delayed != 0 || st.DedupEntries != 0 {
			t.Fatalf("after the delay: %d ready, %d delayed, %d dedup entries; want %d, 0, 0", st.Ready, st.Delayed, st.DedupEntries, 2*n)
		}
		if got := e.p.proposed("tick"); got < 7 {
			t.Fatalf("%d ticks for %d due at once (budget %d)", got, n, state.SweepBudget)
		}
		pending := true
		e.f.Reader().Read(func(v fsm.View) { pending = v.SweepPending() })
		if pending {
			t.Fatal("SweepPending after the ticks")
		}
	})
}
