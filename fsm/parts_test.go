package fsm

import (
	"bytes"
	"io"
	"testing"
)

// TestPartsFollowRestore checks what splitting FSM into parts must keep:
// a Reader and an Integrity taken before a Restore answer from the
// restored state, as the FSM's own methods did. Restore replaces the
// store, so a part that held the store (rather than the FSM) would go on
// answering from the state it replaced, while raft, the scheduler and
// the edge, which keep their parts from start-up on, read it.
func TestPartsFollowRestore(t *testing.T) {
	src := newHarness(t)
	src.create("a", nil)
	src.create("b", nil)
	src.enqueuePayloads("b", "x", "y")

	f := New(Options{})
	r, c := f.Reader(), f.Integrity()
	if n := len(r.ListQueues("")); n != 0 {
		t.Fatalf("an empty state machine lists %d queues", n)
	}
	_, emptyDigest, err := c.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, src.f)))); err != nil {
		t.Fatal(err)
	}

	if got, want := r.AppliedIndex(), src.f.Reader().AppliedIndex(); got != want {
		t.Fatalf("the Reader taken before Restore is at index %d, the restored state at %d", got, want)
	}
	if got, want := len(r.ListQueues("")), len(src.f.Reader().ListQueues("")); got != want || want < 2 {
		t.Fatalf("the Reader taken before Restore lists %d queues, the restored state has %d", got, want)
	}
	if info, err := r.GetQueue("b"); err != nil || info.Stats.Ready != 2 {
		t.Fatalf("the Reader taken before Restore: queue b %+v, %v; want 2 ready", info, err)
	}
	idx, d, err := c.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if want := digestOf(t, src.f); d != want || d == emptyDigest {
		t.Fatalf("the Integrity taken before Restore digests %s, the restored state %s (empty %s)", d, want, emptyDigest)
	}
	// A restored replica answers for its index as if it had applied a
	// Checkpoint there (LocalDigest of a node restored from a backup).
	if at, err := c.DigestAt(idx); err != nil || at != d {
		t.Fatalf("DigestAt(%d) through the part taken before Restore = %q, %v; want %q", idx, at, err, d)
	}
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
}
