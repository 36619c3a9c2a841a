package state

import (
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestRecentIsBounded: the record of settled outcomes never holds more
// than its bound; the oldest entries go first, the counters and the
// expiry index stay exact (Verify), and deleting a queue forgets its
// entries.
func TestRecentIsBounded(t *testing.T) {
	s := New()
	s.maxRecent = 4
	index := uint64(0)
	begin := func() *Tx {
		index++
		s.SetApplied(index)
		return s.Begin(index, 1, recentVersion, 1000+int64(index), NewTouched())
	}
	if r := begin().SetClusterVersion(&fsmv1.SetClusterVersion{Version: recentVersion}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, name := range []string{"a", "b"} {
		if r := begin().CreateQueue(&fsmv1.CreateQueue{Name: name}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var refs []*fsmv1.Ref
	for i := range 6 {
		q := []string{"a", "b"}[i%2]
		enq := begin().Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: q, Messages: []*fsmv1.EnqueueMessage{{Payload: []byte("m")}}}}})
		id := enq.Batches[0].IDs[0]
		g := begin().Grant(&fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{{Queue: q, MessageId: id, ConsumerId: "c", DeadlineMs: 1_000_000, LeaseToken: uint64(1000 + i)}}})
		if g.Err != nil || g.Items[0] != nil {
			t.Fatal(g.Err, g.Items[0])
		}
		ref := &fsmv1.Ref{Queue: q, MessageId: id, LeaseToken: g.Deliveries[0].LeaseToken}
		if r := begin().Ack([]*fsmv1.Ref{ref}); r.Items[0] != nil {
			t.Fatal(r.Items[0])
		}
		refs = append(refs, ref)
		if err := s.Verify(); err != nil {
			t.Fatal(err)
		}
		if n := s.recentExp.Len(); n > 4 {
			t.Fatalf("%d recent entries, bound 4", n)
		}
	}
	for i, ref := range refs {
		err := begin().Ack([]*fsmv1.Ref{ref}).Items[0]
		if remembered := i >= 2; remembered != (err == nil) {
			t.Errorf("retried ack %d: %v (the oldest two are forgotten, the newest four remembered)", i, err)
		}
	}
	if d := begin().DeleteQueue(&fsmv1.DeleteQueue{Name: "a"}); d.Err != nil {
		t.Fatal(d.Err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	if n := s.recentExp.Len(); n != 2 {
		t.Fatalf("%d recent entries after deleting a, want b's 2", n)
	}
}

// TestDeleteKeysShareTheBound: keyed deletes are recent outcomes kept
// outside any queue: they count in the same bound as the queues' (the
// oldest of either kind goes first), survive the queue's re-creation and
// deletion, and Verify checks their index and cost.
func TestDeleteKeysShareTheBound(t *testing.T) {
	s := New()
	s.maxRecent = 3
	index := uint64(0)
	begin := func() *Tx {
		index++
		s.SetApplied(index)
		return s.Begin(index, 1, DeleteKeyVersion, 1000+int64(index), NewTouched())
	}
	if r := begin().SetClusterVersion(&fsmv1.SetClusterVersion{Version: DeleteKeyVersion}); r.Err != nil {
		t.Fatal(r.Err)
	}
	mustOK := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Verify(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		mustOK(begin().CreateQueue(&fsmv1.CreateQueue{Name: "q"}).Err)
		mustOK(begin().PurgeQueue(&fsmv1.PurgeQueue{Name: "q", IdempotencyKey: "p" + k}).Err)
		mustOK(begin().DeleteQueue(&fsmv1.DeleteQueue{Name: "q", IdempotencyKey: k}).Err)
		if n := s.recentExp.Len(); n > 3 {
			t.Fatalf("%d recent entries, bound 3", n)
		}
	}
	// Each purge key went with its queue; of the four delete keys the
	// newest three are left.
	if n := s.deleted.Len(); n != 3 {
		t.Fatalf("%d delete keys, want 3", n)
	}
	for i, k := range []string{"k1", "k2", "k3", "k4"} {
		if got := s.deletedBefore("q", k); got != (i > 0) {
			t.Errorf("delete key %s remembered: %v; only the oldest, k1, is forgotten", k, got)
		}
	}
	mustOK(begin().CreateQueue(&fsmv1.CreateQueue{Name: "q"}).Err)
	mustOK(begin().DeleteQueue(&fsmv1.DeleteQueue{Name: "q", IdempotencyKey: "k4"}).Err)
	if _, ok := s.View().Queue("q"); !ok {
		t.Fatal("a repeated delete deleted the queue created after it")
	}
}
