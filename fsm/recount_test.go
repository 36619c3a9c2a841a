package fsm

import (
	"errors"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func recountCmd(queues ...string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_RecountQueues{RecountQueues: &fsmv1.RecountQueues{Queues: queues}}}
}

// stateWithEveryCounter builds queues whose counters are all non-zero:
// ready at two priorities, delayed, in flight and dead-lettered.
func stateWithEveryCounter(h *harness) {
	h.t.Helper()
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 1})
	h.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte("hi"), Priority: 5}, &fsmv1.EnqueueMessage{Payload: []byte("lo")},
		&fsmv1.EnqueueMessage{Payload: []byte("later"), DelayMs: 60_000}, &fsmv1.EnqueueMessage{Payload: []byte("dead")},
		&fsmv1.EnqueueMessage{Payload: []byte("held")})
	ids := h.enqueuePayloads("q", "x")
	ds := h.grant("q", "c1", 30_000, ids...)
	h.nack(ds[0], 0, true)
	ready := h.readyIDs("q")
	if len(ready) != 4 {
		h.t.Fatalf("ready %v", ready)
	}
}

// TestRecountOnRightCountersChangesNothing: on a state whose counters are
// right, RecountQueues repairs nothing and leaves the digest alone.
func TestRecountOnRightCountersChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.raise(RecountVersion)
	stateWithEveryCounter(h)
	before := h.info("q").Stats
	res := as[*RecountResult](t, h.mustOK(recountCmd("q", "q.dlq", "missing")))
	if len(res.Repairs) != 0 || res.TotalBytesRepaired {
		t.Fatalf("repairs on right counters: %+v", res)
	}
	if after := h.info("q").Stats; before != after {
		t.Fatalf("a recount changed right counters: %+v -> %+v", before, after)
	}
	if n := len(h.f.Integrity().CounterRepairs()); n != 0 {
		t.Fatalf("repairs counted: %v", h.f.Integrity().CounterRepairs())
	}
}

// TestRecountIsVersion6: in an entry of version 5 the command is unknown,
// as it was to a build that applied up to version 5.
func TestRecountIsVersion6(t *testing.T) {
	h := newHarness(t)
	h.raise(RecountVersion - 1)
	h.create("q", nil)
	res := h.apply(recountCmd("q"))
	if err := res.Failure(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("version-5 recount: %v, want ErrInvalid (unknown command)", err)
	}
}

// TestAuditCopiesRotate: the audit's copies follow the sorted names from
// the cursor, at most budget at a time, and recount what Recount does.
func TestAuditCopiesRotate(t *testing.T) {
	h := newHarness(t)
	for _, q := range []string{"d", "b", "a", "c"} {
		h.create(q, nil) // each with its DLQ: a, a.dlq, b, b.dlq, ...
	}
	var seen []string
	cursor := ""
	for range 10 {
		cs := h.f.Integrity().AuditCopies(cursor, 3)
		for _, c := range cs {
			seen = append(seen, c.Queue)
			if have, want := c.Recount(); !have.Equal(want) {
				t.Fatalf("%s: have %v want %v", c.Queue, have, want)
			}
		}
		if len(cs) < 3 {
			break
		}
		cursor = cs[len(cs)-1].Queue
	}
	want := []string{"a", "a.dlq", "b", "b.dlq", "c", "c.dlq", "d", "d.dlq"}
	if len(seen) != len(want) {
		t.Fatalf("rotation visited %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("rotation visited %v, want %v", seen, want)
		}
	}
}
