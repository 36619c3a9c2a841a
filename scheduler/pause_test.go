package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func (e *env) pause(q, key string, d time.Duration) {
	e.t.Helper()
	e.apply(&fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: q, FairnessKey: key, DurationMs: d.Milliseconds()}}})
}

func (e *env) resume(q, key string) {
	e.t.Helper()
	e.apply(&fsmv1.Command{Op: &fsmv1.Command_ResumeQueue{ResumeQueue: &fsmv1.ResumeQueue{Name: q, FairnessKey: key}}})
}

func keysOf(ds []*state.Delivery) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[d.FairnessKey]++
	}
	return out
}

// TestPausedKeyGetsNothingOthersFlow: a paused key is granted nothing
// while the other keys are delivered in full; a timed pause ends by itself
// on the state clock (the scheduler ticks at its end, as for a delay) and
// its messages follow.
func TestPausedKeyGetsNothingOthersFlow(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.raise(fsm.PauseVersion)
		e.createQueue("q", nil)
		e.pause("q", "a", 10*time.Second)
		e.enqueueN("q", 5, &fsmv1.EnqueueMessage{FairnessKey: "a"})
		e.enqueueN("q", 5, &fsmv1.EnqueueMessage{FairnessKey: "b"})
		e.enqueueN("q", 5, &fsmv1.EnqueueMessage{})
		c := e.register("q", 100)
		got := keysOf(e.drain(c))
		if got["a"] != 0 || got["b"] != 5 || got[""] != 5 {
			t.Fatalf("deliveries by key %v: want none of the paused key a, every other", got)
		}
		e.advance(9 * time.Second)
		e.expectNone(c)
		e.advance(1100 * time.Millisecond)
		if got := keysOf(e.drain(c)); got["a"] != 5 {
			t.Fatalf("after the pause's end: %v, want a's 5", got)
		}
		if qi := e.info("q"); len(qi.PausedKeys) != 0 {
			t.Fatalf("paused keys %+v after the end", qi.PausedKeys)
		}
	})
}

// TestPausedQueueGetsNothingUntilResumed: a whole-queue pause stops every
// grant, carried grants included (a consumer acking its leases gets no
// next message in the ack's entry), while leases out are acked; the
// resume lets the backlog go.
func TestPausedQueueGetsNothingUntilResumed(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, carryGrants)
		e.raise(fsm.PauseVersion)
		e.createQueue("q", nil)
		e.enqueueN("q", 10, &fsmv1.EnqueueMessage{FairnessKey: "k"})
		c := e.register("q", 2)
		out := e.recvN(c, 2)
		e.pause("q", "", 0)
		grants, carried := e.p.proposed("grant"), e.p.proposed("ack+grant")
		e.settle(out...) // the ack's entry would carry the next grants
		e.advance(time.Minute)
		e.expectNone(c)
		if g, a := e.p.proposed("grant"), e.p.proposed("ack+grant"); g != grants || a != carried {
			t.Fatalf("while paused the scheduler proposed %d grant and %d ack+grant entries: it picks nothing of a paused queue", g-grants, a-carried)
		}
		if st := e.info("q").Stats; st.Ready != 8 || st.InFlight != 0 || st.AckedTotal != 2 {
			t.Fatalf("stats while paused %+v", st)
		}
		e.resume("q", "")
		if got := len(e.recvN(c, 2)); got != 2 {
			t.Fatalf("%d after resume", got)
		}
	})
}

// TestManyPausedKeysAreNotWalked: with 2,000 paused keys holding
// messages and one that is not, a pass grants the free key's messages and
// the picking never visits a paused key (NextKey does not return one).
func TestManyPausedKeysAreNotWalked(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.raise(fsm.PauseVersion)
		e.createQueue("q", nil)
		for i := range 2000 {
			e.pause("q", fmt.Sprint("p", i), 0)
		}
		var msgs []*fsmv1.EnqueueMessage
		for i := range 2000 {
			msgs = append(msgs, &fsmv1.EnqueueMessage{FairnessKey: fmt.Sprint("p", i)})
		}
		e.enqueue("q", msgs...)
		e.enqueueN("q", 50, &fsmv1.EnqueueMessage{FairnessKey: "free"})
		visited := 0
		e.f.Reader().Read(func(v fsm.View) {
			qv, _ := v.Queue("q")
			for k, ok := qv.NextKey(0, 0); ok; k, ok = qv.NextKey(0, k.Seq) {
				visited++
			}
		})
		if visited != 1 {
			t.Fatalf("the ring holds %d keys, want only the free one", visited)
		}
		c := e.register("q", 100)
		if got := keysOf(e.drain(c)); got["free"] != 50 || len(got) != 1 {
			t.Fatalf("deliveries by key %v", got)
		}
	})
}
