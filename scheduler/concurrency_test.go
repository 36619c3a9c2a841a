package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// capped is an env at the newest log version with queue q capped as cfg.
func capped(t *testing.T, cfg *fsmv1.QueueConfig) *env {
	e := newEnv(t)
	e.raise(fsm.MaxLogVersion)
	e.createQueue("q", cfg)
	return e
}

// countGrants counts the grants the scheduler proposes.
func countGrants(e *env) *atomic.Int64 {
	var n atomic.Int64
	e.p.setHook(func(_ context.Context, cmd *fsmv1.Command) error {
		n.Add(int64(len(cmd.GetLeaseGrant().GetGrants()) + len(cmd.GetAck().GetGrants())))
		return nil
	})
	return &n
}

func payloads(ds []*state.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}

// TestConcurrencyNoHeadOfLineBlocking: a key at its cap holds only its
// own messages: other keys and unkeyed messages of the same fairness key
// behind its backlog flow, and the scheduler proposes no grant the state
// would refuse (its own count of what it picked and has pending).
func TestConcurrencyNoHeadOfLineBlocking(t *testing.T) {
	for _, fk := range []string{"", "per-key"} {
		t.Run(fmt.Sprintf("fairness=%q", fk), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := capped(t, &fsmv1.QueueConfig{ConcurrencyLimit: 1, ConcurrencyLimits: map[string]int32{"b": 2}})
				grants := countGrants(e)
				key := func(k string) string {
					if fk == "" {
						return ""
					}
					return k
				}
				var msgs []*fsmv1.EnqueueMessage
				for i := range 20 {
					msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: fmt.Appendf(nil, "a%d", i), ConcurrencyKey: "a", FairnessKey: key("a")})
				}
				for i := range 5 {
					msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: fmt.Appendf(nil, "b%d", i), ConcurrencyKey: "b", FairnessKey: key("b")})
				}
				for i := range 5 {
					msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: fmt.Appendf(nil, "n%d", i), FairnessKey: key("n")})
				}
				e.enqueue("q", msgs...)
				c := e.register("q", 100)
				got := payloads(e.drain(c))
				slices.Sort(got)
				want := []string{"a0", "b0", "b1", "n0", "n1", "n2", "n3", "n4"}
				if !slices.Equal(got, want) {
					t.Fatalf("delivered %v, want %v", got, want)
				}
				if n := grants.Load(); n != int64(len(want)) {
					t.Fatalf("%d grants proposed for %d deliveries: the scheduler proposed grants past a cap", n, len(want))
				}
			})
		})
	}
}

// TestConcurrencyCapOneKeepsOrder: a cap of 1 delivers a key's messages
// one at a time in enqueue order; a nacked one and an expired one come
// again before the next, and a backing-off head holds its key.
func TestConcurrencyCapOneKeepsOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := capped(t, &fsmv1.QueueConfig{ConcurrencyLimit: 1, VisibilityTimeoutMs: 1000})
		for i := range 6 {
			e.enqueue("q", &fsmv1.EnqueueMessage{Payload: fmt.Appendf(nil, "%d", i), ConcurrencyKey: "k"})
		}
		e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("other"), ConcurrencyKey: "j"})
		c := e.register("q", 10)
		first := e.drain(c)
		if got := payloads(first); len(got) != 2 || got[0] != "0" || got[1] != "other" {
			t.Fatalf("first deliveries %v, want 0 and other", got)
		}
		e.ack(first[1])
		var seq []string
		d := first[0]
		for step := 0; ; step++ {
			seq = append(seq, fmt.Sprintf("%s#%d", d.Payload, d.Attempt))
			e.expectNone(c) // nothing more of the key while one is out
			switch step {
			case 1: // nacked: the same message is next
				e.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(t, d)}}}}})
			case 3: // backs off 5 s: nothing of the key meanwhile
				e.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(t, d), DelayMs: 5000}}}}})
				e.advance(4 * time.Second)
				e.expectNone(c)
				e.advance(2 * time.Second)
			case 5: // expires (the lease grace is 1 s)
				e.advance(3 * time.Second)
			default:
				e.ack(d)
			}
			if len(seq) == 9 {
				break
			}
			if ds := e.drain(c); len(ds) != 1 {
				t.Fatalf("after %v: %d deliveries %v, want the next one", seq, len(ds), payloads(ds))
			} else {
				d = ds[0]
			}
		}
		want := []string{"0#1", "1#1", "1#2", "2#1", "2#2", "3#1", "3#2", "4#1", "5#1"}
		if !slices.Equal(seq, want) {
			t.Fatalf("order %v, want %v", seq, want)
		}
	})
}

// TestConcurrencyHeadNotReady: under a cap of 1 a delayed head holds its
// key (order first); under a larger cap the key's ready messages go
// ahead of it (throughput first).
func TestConcurrencyHeadNotReady(t *testing.T) {
	for _, limit := range []int32{1, 3} {
		t.Run(fmt.Sprint("cap", limit), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := capped(t, &fsmv1.QueueConfig{ConcurrencyLimit: limit})
				e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("head"), ConcurrencyKey: "k", DelayMs: 2000})
				e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("x"), ConcurrencyKey: "k"}, &fsmv1.EnqueueMessage{Payload: []byte("y"), ConcurrencyKey: "k"})
				c := e.register("q", 10)
				got := payloads(e.drain(c))
				if limit == 1 {
					if len(got) != 0 {
						t.Fatalf("cap 1 delivered %v ahead of its delayed head", got)
					}
					e.advance(2500 * time.Millisecond)
					if got := payloads(e.drain(c)); !slices.Equal(got, []string{"head"}) {
						t.Fatalf("cap 1 once the head is due: %v", got)
					}
					return
				}
				if !slices.Equal(got, []string{"x", "y"}) {
					t.Fatalf("cap 3 delivered %v, want x and y ahead of the delayed head", got)
				}
			})
		})
	}
}

// TestConcurrencyThrottledHead: under a cap of 1 a head waiting on a
// throttle holds its key; under a larger cap the key's other messages
// (another throttle group) go ahead.
func TestConcurrencyThrottledHead(t *testing.T) {
	for _, limit := range []int32{1, 2} {
		t.Run(fmt.Sprint("cap", limit), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				cfg := throttles("slow", 0.001, 1)
				cfg.ConcurrencyLimit = limit
				e := capped(t, cfg)
				// The token of slow is spent on a message of another key.
				e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("spend"), ThrottleKeys: []string{"slow"}})
				c := e.register("q", 10)
				e.ack(e.recv(c))
				e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("head"), ConcurrencyKey: "k", ThrottleKeys: []string{"slow"}},
					&fsmv1.EnqueueMessage{Payload: []byte("next"), ConcurrencyKey: "k"})
				got := payloads(e.drain(c))
				if limit == 1 && len(got) != 0 {
					t.Fatalf("cap 1 delivered %v ahead of its throttled head", got)
				}
				if limit > 1 && !slices.Equal(got, []string{"next"}) {
					t.Fatalf("cap %d delivered %v, want next ahead of the throttled head", limit, got)
				}
			})
		})
	}
}

// TestConcurrencyCapRaisedAtRuntime: UpdateQueue raising a cap lets the
// waiting messages through at once.
func TestConcurrencyCapRaisedAtRuntime(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := capped(t, &fsmv1.QueueConfig{ConcurrencyLimit: 1})
		e.enqueueN("q", 5, &fsmv1.EnqueueMessage{ConcurrencyKey: "k"})
		c := e.register("q", 10)
		if n := len(e.drain(c)); n != 1 {
			t.Fatalf("cap 1: %d delivered", n)
		}
		e.updateQueue("q", &fsmv1.QueueConfig{ConcurrencyLimits: map[string]int32{"k": 4}}, "concurrency_limits")
		if n := len(e.drain(c)); n != 3 {
			t.Fatalf("after raising k to 4: %d more delivered, want 3", n)
		}
	})
}
