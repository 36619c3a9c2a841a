package fsm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func deleteKeyed(name, key string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: name, IdempotencyKey: key}}}
}

// TestRetriedDeleteKeepsTheNewQueue is the lost-delete-reply race (issue
// 20, hole 4): a delete applies, its answer is lost, someone creates the
// queue again and enqueues, and the client's retry arrives. From log
// version 11 the retry carries the first attempt's idempotency key and
// answers OK without deleting the new queue or its message; a version-10
// entry ignores the key and deletes it, as a version-10 build does.
func TestRetriedDeleteKeepsTheNewQueue(t *testing.T) {
	for _, tc := range []struct {
		version  uint32
		survives bool
	}{{DeleteKeyVersion - 1, false}, {DeleteKeyVersion, true}} {
		t.Run(fmtVersion(tc.version), func(t *testing.T) {
			h := newHarness(t)
			h.raise(tc.version)
			h.create("jobs", nil)
			h.enqueuePayloads("jobs", "old")
			h.mustOK(deleteKeyed("jobs", "k1")) // the answer is lost
			h.create("jobs", nil)
			h.enqueuePayloads("jobs", "acknowledged")
			if err := h.apply(deleteKeyed("jobs", "k1")).Failure(); err != nil {
				t.Fatalf("retried delete: %v, want OK (the first attempt succeeded)", err)
			}
			err := h.f.Reader().HasQueue("jobs")
			if !tc.survives {
				if !errors.Is(err, ErrQueueNotFound) {
					t.Fatalf("version %d: the retry left the queue (%v); want it deleted as before", tc.version, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("the retried delete deleted the queue created after it: %v", err)
			}
			if got := h.readyIDs("jobs"); len(got) != 1 || got[0] != "acknowledged" {
				t.Fatalf("after the retry the new queue holds %v, want [acknowledged]", got)
			}
			// A delete with another key (a new call) deletes it.
			h.mustOK(deleteKeyed("jobs", "k2"))
			if err := h.f.Reader().HasQueue("jobs"); !errors.Is(err, ErrQueueNotFound) {
				t.Fatalf("a new delete left the queue: %v", err)
			}
		})
	}
}

// TestDeleteKeyRules: only a delete that succeeded is remembered (a failed
// one is judged afresh when retried); a repeat answers OK even after the
// queue is gone; the record lapses after the window; a key too long is
// refused and changes nothing.
func TestDeleteKeyRules(t *testing.T) {
	h := newHarness(t)
	h.raise(DeleteKeyVersion)
	if err := h.apply(deleteKeyed("jobs", "k1")).Failure(); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("delete of a missing queue: %v", err)
	}
	h.create("jobs", nil)
	h.mustOK(deleteKeyed("jobs", "k1")) // the failed attempt recorded nothing
	if err := h.f.Reader().HasQueue("jobs"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("delete after a failed attempt with the same key: queue left (%v)", err)
	}
	if err := h.apply(deleteKeyed("jobs", "k1")).Failure(); err != nil {
		t.Fatalf("repeat of a delete that succeeded: %v, want OK as the first", err)
	}
	// The key belongs to the name: the same key on another queue is a
	// different delete.
	h.create("other", nil)
	h.mustOK(deleteKeyed("other", "k1"))
	if err := h.f.Reader().HasQueue("other"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("the key of jobs' delete stopped the delete of other: %v", err)
	}

	h.create("jobs", nil)
	h.now += state.RecentWindowMs
	h.tick()
	h.mustOK(deleteKeyed("jobs", "k1"))
	if err := h.f.Reader().HasQueue("jobs"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("a repeat after the window was not judged afresh: %v", err)
	}

	h.create("jobs", nil)
	before := stateDigest(t, h.f)
	err := h.apply(deleteKeyed("jobs", strings.Repeat("k", MaxDedupIDLen+1))).Failure()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "idempotency_key") {
		t.Fatalf("a key too long: %v, want ErrInvalid naming idempotency_key", err)
	}
	if stateDigest(t, h.f) != before {
		t.Fatal("a refused delete changed the state")
	}
}

// TestDeleteKeysTravel: the record of keyed deletes is state: a restored
// replica has the same digest and answers a retry as the live one, and
// the digest sees the record (two states differing only in it differ).
func TestDeleteKeysTravel(t *testing.T) {
	h := newHarness(t)
	h.raise(DeleteKeyVersion)
	h.create("jobs", nil)
	withoutKey := stateDigest(t, h.f)
	h.mustOK(deleteKeyed("jobs", "k1"))
	h.create("jobs", nil)
	if stateDigest(t, h.f) == withoutKey {
		t.Fatal("the digest does not see the delete key")
	}

	restored := New(Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if a, b := digestOf(t, h.f), digestOf(t, restored); a != b {
		t.Fatalf("restored digest %s != live %s", b, a)
	}
	live := h.f
	for _, f := range []*FSM{live, restored} {
		h.f = f
		h.mustOK(deleteKeyed("jobs", "k1"))
		if err := f.Reader().HasQueue("jobs"); err != nil {
			t.Fatalf("a retried delete on a restored replica deleted the new queue: %v", err)
		}
		h.index-- // the same entry on both replicas
	}
	h.index++
	if a, b := digestOf(t, live), digestOf(t, restored); a != b {
		t.Fatalf("after the retry: restored digest %s != live %s", b, a)
	}
}
