package fsm

import (
	"errors"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func deleteIfEmpty(name string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: name, IfEmpty: true}}}
}

// Under version 6 a DeleteQueue with if_empty refuses a queue that holds
// messages, or whose messages wait in its dead-letter queue, and changes
// nothing; under version 5 the same entry deletes, as a version-5 build
// applies it.
func TestDeleteIfEmptyNeedsVersion6(t *testing.T) {
	for _, v := range []uint32{IfEmptyVersion - 1, IfEmptyVersion} {
		h := newHarness(t)
		h.raise(v)
		h.create("jobs", nil)
		h.enqueuePayloads("jobs", "a", "b")
		before := stateDigest(t, h.f)
		err := h.apply(deleteIfEmpty("jobs")).Failure()
		if v < IfEmptyVersion {
			if err != nil {
				t.Fatalf("version %d: %v, want the delete applied as before", v, err)
			}
			continue
		}
		if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "queue jobs holds 2 messages (2 ready") {
			t.Fatalf("version %d: %v, want ErrNotEmpty naming jobs and its 2 messages", v, err)
		}
		if stateDigest(t, h.f) != before {
			t.Fatal("a refused delete changed the state")
		}
	}
}

func TestDeleteIfEmpty(t *testing.T) {
	h := newHarness(t)
	h.raise(MaxLogVersion)
	h.create("jobs", &fsmv1.QueueConfig{MaxDeliveries: 1})

	// A message in its dead-letter queue still counts: the delete would
	// drop it with the DLQ.
	ids := h.enqueuePayloads("jobs", "x")
	d := h.grant("jobs", "c", 30_000, ids...)
	h.nack(d[0], 0, true)
	if err := h.apply(deleteIfEmpty("jobs")).Failure(); !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "1 dead-lettered") {
		t.Fatalf("delete with a dead-lettered message: %v", err)
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "jobs" + DLQSuffix}}})
	if err := h.apply(deleteIfEmpty("jobs")).Failure(); err != nil {
		t.Fatalf("delete of an empty queue: %v", err)
	}
	if h.f.Reader().HasQueue("jobs") == nil || h.f.Reader().HasQueue("jobs"+DLQSuffix) == nil {
		t.Fatal("the queue or its DLQ survived the delete")
	}
}
