package fsm

import (
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// harness drives an FSM directly with an incrementing index and a settable
// clock, checking Verify after every command.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
	now   int64
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, f: New(Options{}), now: 1_000_000}
}

func (h *harness) apply(cmd *fsmv1.Command) *Result {
	h.t.Helper()
	h.index++
	cmd.NowMs = h.now
	res := h.f.ApplyCommand(h.index, cmd)
	if err := h.f.Verify(); err != nil {
		h.t.Fatalf("Verify after command %d (%T): %v", h.index, cmd.Op, err)
	}
	return res
}

func (h *harness) mustOK(cmd *fsmv1.Command) *Result {
	h.t.Helper()
	res := h.apply(cmd)
	if res.Err != nil {
		h.t.Fatalf("command %T: %v", cmd.Op, res.Err)
	}
	for i, err := range res.BatchErrs {
		if err != nil {
			h.t.Fatalf("enqueue batch %d: %v", i, err)
		}
	}
	for i, err := range res.Items {
		if err != nil {
			h.t.Fatalf("item %d: %v", i, err)
		}
	}
	return res
}

func (h *harness) create(name string, cfg *fsmv1.QueueConfig) {
	h.t.Helper()
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: cfg}}})
}

func (h *harness) enqueue(q string, msgs ...*fsmv1.EnqueueMessage) []string {
	h.t.Helper()
	res := h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: q, Messages: msgs}}}}})
	return res.IDs[0]
}

func (h *harness) enqueuePayloads(q string, payloads ...string) []string {
	msgs := make([]*fsmv1.EnqueueMessage, len(payloads))
	for i, p := range payloads {
		msgs[i] = &fsmv1.EnqueueMessage{Payload: []byte(p)}
	}
	return h.enqueue(q, msgs...)
}

// grant leases the given ids to consumer with a visibility of vis ms.
func (h *harness) grant(q, consumer string, vis int64, ids ...string) []*raftqv1.Delivery {
	h.t.Helper()
	var gs []*fsmv1.Grant
	for _, s := range ids {
		id, err := ParseID(s)
		if err != nil {
			h.t.Fatal(err)
		}
		gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: id, ConsumerId: consumer, DeadlineMs: h.now + vis})
	}
	return h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: gs}}}).Deliveries
}

func ref(d *raftqv1.Delivery) *fsmv1.Ref {
	id, _ := ParseID(d.Id)
	tok, _ := ParseID(d.LeaseToken)
	return &fsmv1.Ref{Queue: d.Queue, MessageId: id, LeaseToken: tok}
}

func (h *harness) ack(ds ...*raftqv1.Delivery) *Result {
	var refs []*fsmv1.Ref
	for _, d := range ds {
		refs = append(refs, ref(d))
	}
	return h.apply(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}})
}

func (h *harness) nack(d *raftqv1.Delivery, delay int64, deadLetter bool) *Result {
	return h.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), DelayMs: delay, DeadLetter: deadLetter}}}}})
}

func (h *harness) tick() { h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}}) }

func (h *harness) info(q string) *raftqv1.QueueInfo {
	h.t.Helper()
	qi, err := h.f.GetQueue(q)
	if err != nil {
		h.t.Fatal(err)
	}
	return qi
}

// readyIDs returns what Peek would deliver now.
func (h *harness) readyIDs(q string) []string {
	h.t.Helper()
	ds, err := h.f.Peek(q, 1000, false)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}
