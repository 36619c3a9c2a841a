package scheduler

import (
	"fmt"
	"github.com/raftq/raftq/fsm/state"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func throttles(kv ...any) *fsmv1.QueueConfig {
	cfg := &fsmv1.QueueConfig{Throttles: map[string]*fsmv1.ThrottleRule{}}
	for i := 0; i < len(kv); i += 3 {
		cfg.Throttles[kv[i].(string)] = &fsmv1.ThrottleRule{RatePerSec: kv[i+1].(float64), Burst: int32(kv[i+2].(int))}
	}
	return cfg
}

// countFor advances the fake clock by step until d has passed, letting the
// scheduler settle after each step, and returns what c received meanwhile.
func (e *env) countFor(c *Consumer, d, step time.Duration) []*state.Delivery {
	e.t.Helper()
	var got []*state.Delivery
	for elapsed := time.Duration(0); elapsed+step <= d; elapsed += step {
		e.advance(step)
		got = append(got, e.drain(c)...)
	}
	return got
}

func within(got, want int, tol float64) bool {
	return math.Abs(float64(got-want)) <= math.Max(1, tol*float64(want))
}

// TestThrottleRate: 100/s with burst 10 delivers 10 at once, then 100 per
// simulated second (±2%), whatever the granularity of time.
func TestThrottleRate(t *testing.T) {
	for _, step := range []time.Duration{10 * time.Millisecond, 7 * time.Millisecond, 33 * time.Millisecond, time.Millisecond} {
		t.Run(step.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t)
				e.createQueue("q", throttles("t", 100.0, 10))
				c := e.register("q", 1000)
				e.enqueueN("q", 600, &fsmv1.EnqueueMessage{ThrottleKeys: []string{"t"}})
				if got := len(e.drain(c)); got != 10 {
					t.Fatalf("burst: %d, want 10", got)
				}
				for sec := 1; sec <= 2; sec++ {
					got := len(e.countFor(c, time.Second, step))
					if !within(got, 100, 0.02) {
						t.Fatalf("second %d: %d deliveries, want 100 ±2%%", sec, got)
					}
				}
			})
		})
	}
}

// readings is a Clock that records when it was read: the loop reads it
// once per pass, so it shows when the loop woke.
type readings struct {
	mu sync.Mutex
	at []time.Time
}

func (r *readings) Now() time.Time {
	now := time.Now()
	r.mu.Lock()
	r.at = append(r.at, now)
	r.mu.Unlock()
	return now
}

func (r *readings) since(i int) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at[i:])
}

func (r *readings) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

// TestThrottleNoSpin: with everything throttled the loop sleeps until the
// next token instead of spinning: it is neither kicked nor woken by a
// timer before that instant, and it wakes at that instant.
func TestThrottleNoSpin(t *testing.T) {
	bubble(t, func(t *testing.T) {
		clock := &readings{}
		e := newEnv(t, func(c *Config) { c.Clock = clock })
		e.createQueue("q", throttles("t", 1.0, 1))
		c := e.register("q", 1000)
		e.enqueueN("q", 100, &fsmv1.EnqueueMessage{ThrottleKeys: []string{"t"}})
		if got := len(e.drain(c)); got != 1 {
			t.Fatalf("got %d", got)
		}
		want := time.Now().Add(time.Second) // the next token
		seen := clock.n()
		e.advance(999 * time.Millisecond)
		e.expectNone(c)
		if woke := clock.since(seen); len(woke) != 0 {
			t.Fatalf("loop woke at %v while everything was throttled until %v", woke, want)
		}
		e.advance(time.Millisecond)
		if got := len(e.drain(c)); got != 1 {
			t.Fatalf("got %d after a second", got)
		}
		if woke := clock.since(seen); len(woke) == 0 || !woke[0].Equal(want) {
			t.Fatalf("loop woke at %v, want first at %v (the next token)", woke, want)
		}
	})
}

// TestTwoThrottleKeys: a message with two throttle keys needs a token from
// each; messages with only one key share that key's bucket.
func TestTwoThrottleKeys(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", throttles("a", 100.0, 5, "b", 20.0, 2))
		c := e.register("q", 5000)
		e.enqueueN("q", 300, &fsmv1.EnqueueMessage{FairnessKey: "ab", ThrottleKeys: []string{"a", "b"}})
		e.enqueueN("q", 300, &fsmv1.EnqueueMessage{FairnessKey: "a", ThrottleKeys: []string{"a", "a"}})
		got := e.drain(c)
		got = append(got, e.countFor(c, time.Second, 5*time.Millisecond)...)
		n := map[string]int{}
		for _, d := range got {
			n[d.FairnessKey]++
		}
		// b allows 2 + 20 in the second; a allows 5 + 100 in total, shared.
		if n["ab"] > 22 || n["ab"] < 20 {
			t.Fatalf("messages with a and b: %d, want ~22 (b's limit)", n["ab"])
		}
		if tot := n["ab"] + n["a"]; !within(tot, 105, 0.02) {
			t.Fatalf("messages using a: %d, want 105 (a's limit)", tot)
		}
	})
}

// TestThrottledKeyDoesNotDelayOthers: messages whose throttle is exhausted
// do not hold back unthrottled ones, in another fairness key or in the
// same one.
func TestThrottledKeyDoesNotDelayOthers(t *testing.T) {
	for _, tc := range []struct{ slowKey, fastKey string }{
		{"slow", "fast"},
		{"", ""},
	} {
		t.Run(fmt.Sprintf("keys %q/%q", tc.slowKey, tc.fastKey), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t)
				e.createQueue("q", throttles("slow", 1.0, 1))
				c := e.register("q", 200)
				e.enqueueN("q", 50, &fsmv1.EnqueueMessage{FairnessKey: tc.slowKey, ThrottleKeys: []string{"slow"}})
				e.enqueueN("q", 50, &fsmv1.EnqueueMessage{FairnessKey: tc.fastKey, ThrottleKeys: []string{"unruled"}})
				n := map[bool]int{}
				for _, d := range e.drain(c) {
					n[len(d.ThrottleKeys) > 0 && d.ThrottleKeys[0] == "slow"]++
				}
				if n[true] != 1 || n[false] != 50 {
					t.Fatalf("slow %d, fast %d; want 1 and 50", n[true], n[false])
				}
			})
		})
	}
}

// TestThrottleRuleChanges: UpdateQueue changes take effect on the next pass.
func TestThrottleRuleChanges(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", throttles("t", 1.0, 1))
		c := e.register("q", 5000)
		e.enqueueN("q", 1000, &fsmv1.EnqueueMessage{ThrottleKeys: []string{"t"}})
		if got := len(e.drain(c)); got != 1 {
			t.Fatalf("got %d", got)
		}
		e.updateQueue("q", throttles("t", 1000.0, 50), "throttles")
		e.expectNone(c) // the bucket keeps its (empty) level
		if got := len(e.countFor(c, 100*time.Millisecond, 10*time.Millisecond)); !within(got, 100, 0.02) {
			t.Fatalf("after raising the rate: %d in 100ms, want 100", got)
		}
		e.updateQueue("q", &fsmv1.QueueConfig{}, "throttles")
		if got := len(e.drain(c)); got != 1000-101 {
			t.Fatalf("after removing the rule: %d, want the rest (%d)", got, 1000-101)
		}
	})
}

// TestStalledQueueIsNotWalked: once a pass finds nothing deliverable in a
// queue with credit to fill (here: every message throttled), later passes
// skip it without reading it until it changes or a token is due, so
// traffic on other queues does not walk its backlog again at every
// applied entry (issue 11, item 3).
func TestStalledQueueIsNotWalked(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("slow", throttles("t", 1.0, 1))
		e.createQueue("busy", nil)
		slow := e.register("slow", 100)
		busy := e.register("busy", 100)
		e.enqueueN("slow", 20, &fsmv1.EnqueueMessage{ThrottleKeys: []string{"t"}})
		if got := e.drain(slow); len(got) != 1 {
			t.Fatalf("%d delivered of a throttled queue, want its one token", len(got))
		}
		walks := func() int {
			e.term.policy.mu.Lock()
			defer e.term.policy.mu.Unlock()
			return e.term.policy.queue("slow").walks
		}
		before := walks()
		for range 10 {
			e.enqueueN("busy", 1, nil)
			e.drain(busy)
		}
		if w := walks(); w != before {
			t.Fatalf("traffic on another queue walked the stalled one %d times", w-before)
		}
		e.enqueueN("slow", 1, &fsmv1.EnqueueMessage{ThrottleKeys: []string{"t"}})
		e.idle()
		if w := walks(); w == before {
			t.Fatal("an enqueue to the stalled queue did not make a pass read it")
		}
		// Its next token is due in a second: then it delivers again.
		if got := e.countFor(slow, time.Second, 100*time.Millisecond); len(got) != 1 {
			t.Fatalf("%d delivered at the next token, want 1", len(got))
		}
	})
}
