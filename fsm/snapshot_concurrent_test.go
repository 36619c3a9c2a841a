package fsm

import (
	"bytes"
	"fmt"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// pausingSink hands each Write to the test and waits for it to let the
// write go on, so the test can apply entries while a snapshot is half
// written.
type pausingSink struct {
	memSink
	wrote  chan struct{}
	resume chan struct{}
	stop   chan struct{} // closed: writes no longer wait (the test ended)
}

func (s *pausingSink) Write(p []byte) (int, error) {
	select {
	case s.wrote <- struct{}{}:
		select {
		case <-s.resume:
		case <-s.stop:
		}
	case <-s.stop:
	}
	return s.memSink.Write(p)
}

// TestSnapshotWhileApplying: a snapshot whose Persist runs while Apply
// carries on (as raft runs them) holds the state as of Snapshot(), byte for
// byte, whatever the entries applied during the write change: messages
// acked, leased, nacked to the dead-letter queue, enqueued into a queue
// already written and one not yet written, a queue purged and one deleted.
// The writer reads the frozen copy without the FSM's lock, so this also
// fails under -race if the copy shares anything Apply writes; and it fails
// if Snapshot() hands the writer the live trees instead of clones.
func TestSnapshotWhileApplying(t *testing.T) {
	h := newHarness(t)
	h.raise(MaxLogVersion)
	queues := []string{"a", "b", "c", "d"}
	ids := map[string][]uint64{}
	payload := bytes.Repeat([]byte{'x'}, 1000)
	for _, q := range queues {
		h.create(q, nil)
		for range 6 {
			msgs := make([]*fsmv1.EnqueueMessage, 300)
			for i := range msgs {
				msgs[i] = &fsmv1.EnqueueMessage{Payload: payload, DedupId: fmt.Sprintf("%s-%d-%d", q, len(ids[q]), i)}
			}
			ids[q] = append(ids[q], h.enqueue(q, msgs...)...)
		}
	}
	// Queue a's first messages leased, so the write meets leases too.
	leased := h.grant("a", "c1", 60_000, ids["a"][:50]...)

	// The state as of the snapshot, written before anything changes.
	want := snapshotBytes(t, h.f)

	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &pausingSink{wrote: make(chan struct{}), resume: make(chan struct{}), stop: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- snap.Persist(sink) }()
	persisted := false
	t.Cleanup(func() {
		// A failed round ends the test with the writer still waiting.
		close(sink.stop)
		if !persisted {
			<-done
		}
	})

	// One round of changes between every two writes of the snapshot.
	rounds := []func(){
		func() { h.ack(leased[:25]...) },
		func() {
			h.enqueuePayloads("a", "new-a")
			h.enqueuePayloads("d", "new-d")
		},
		func() {
			for _, d := range leased[25:30] {
				h.nack(d, 0, true) // to a's dead-letter queue
			}
			h.grant("c", "c2", 60_000, ids["c"][:100]...)
		},
		func() {
			h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "b"}}})
		},
		func() {
			h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "d"}}})
		},
		func() { h.create("e", nil); h.enqueuePayloads("e", "new-e") },
	}
	if len(want) < (len(rounds)+1)<<20 {
		t.Fatalf("state of %d bytes: too small for Persist to write it in a call per round", len(want))
	}
	writes := 0
	for finished := false; !finished; {
		select {
		case <-sink.wrote:
			if writes < len(rounds) {
				rounds[writes]()
			}
			writes++
			sink.resume <- struct{}{}
		case err := <-done:
			finished, persisted = true, true
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if writes < len(rounds) {
		t.Fatalf("the snapshot was written in %d calls, fewer than the %d rounds of changes", writes, len(rounds))
	}
	if got := sink.Bytes(); !bytes.Equal(got, want) {
		t.Fatalf("snapshot written while applying: %d bytes, differs from the state at Snapshot() (%d bytes)", len(got), len(want))
	}
	// The changes did happen (the comparison above is not vacuous).
	if after := snapshotBytes(t, h.f); bytes.Equal(after, want) {
		t.Fatal("the entries applied during the write changed nothing")
	}
}
