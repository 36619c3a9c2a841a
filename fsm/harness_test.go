package fsm

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// harness drives an FSM directly with an incrementing index and a settable
// clock, checking Verify after every command.
type harness struct {
	t       testing.TB
	f       *FSM
	index   uint64
	now     int64
	version uint32 // log version of the entries it applies (0 = 1)
	term    uint64 // Raft term of the entries it applies
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, f: New(Options{}), now: 1_000_000}
}

func (h *harness) apply(cmd *fsmv1.Command) Result {
	h.t.Helper()
	h.index++
	cmd.NowMs = h.now
	if cmd.Version == 0 {
		cmd.Version = h.version
	}
	data, err := Encode(cmd)
	if err != nil {
		h.t.Fatal(err)
	}
	res := h.f.Apply(&raft.Log{Index: h.index, Term: h.term, Type: raft.LogCommand, Data: data}).(Result)
	if err := h.f.Integrity().Verify(); err != nil {
		h.t.Fatalf("Verify after command %d (%T): %v", h.index, cmd.Op, err)
	}
	return res
}

func (h *harness) mustOK(cmd *fsmv1.Command) Result {
	h.t.Helper()
	res := h.apply(cmd)
	if err := res.Failure(); err != nil {
		h.t.Fatalf("command %T: %v", cmd.Op, err)
	}
	var items []error
	switch r := res.(type) {
	case *EnqueueResult:
		for i, b := range r.Batches {
			if b.Err != nil {
				h.t.Fatalf("enqueue batch %d: %v", i, b.Err)
			}
		}
	case *ItemsResult:
		items = r.Items
	case *GrantResult:
		items = r.Items
	case *ExtendResult:
		items = r.Items
	}
	for i, err := range items {
		if err != nil {
			h.t.Fatalf("item %d: %v", i, err)
		}
	}
	return res
}

// as returns res as T, failing the test if it is another result type.
func as[T Result](t testing.TB, res Result) T {
	t.Helper()
	r, ok := res.(T)
	if !ok {
		var want T
		t.Fatalf("result %T (%v), want %T", res, res.Failure(), want)
	}
	return r
}

// raise raises the cluster version to v in an entry of version v, and
// applies every later entry under it, as the leader would.
func (h *harness) raise(v uint32) {
	h.t.Helper()
	h.version = v
	set := &fsmv1.SetClusterVersion{Version: v}
	if v >= HandoverVersion && h.f.Reader().ClusterVersion() < HandoverVersion {
		set.MetaFounders = testFounders // as the leader raising it names them
	}
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: set}})
}

// foundersFor is what a raise from below the handover to v names.
func foundersFor(v uint32) []*fsmv1.MetaServer {
	if v >= HandoverVersion {
		return testFounders
	}
	return nil
}

// testFounders are the meta founders the harness's raise to the handover
// names.
var testFounders = []*fsmv1.MetaServer{{Id: "n1", Address: "127.0.0.1:7001"}}

func (h *harness) create(name string, cfg *fsmv1.QueueConfig) {
	h.t.Helper()
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: cfg}}})
}

func (h *harness) enqueue(q string, msgs ...*fsmv1.EnqueueMessage) []uint64 {
	h.t.Helper()
	res := h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: q, Messages: msgs}}}}})
	return as[*EnqueueResult](h.t, res).Batches[0].IDs
}

func (h *harness) enqueuePayloads(q string, payloads ...string) []uint64 {
	msgs := make([]*fsmv1.EnqueueMessage, len(payloads))
	for i, p := range payloads {
		msgs[i] = &fsmv1.EnqueueMessage{Payload: []byte(p)}
	}
	return h.enqueue(q, msgs...)
}

// grant leases the given ids to consumer with a visibility of vis ms.
func (h *harness) grant(q, consumer string, vis int64, ids ...uint64) []*state.Delivery {
	h.t.Helper()
	var gs []*fsmv1.Grant
	for i, id := range ids {
		// A leader draws each token at random (log version 5); any
		// non-zero value unique per grant stands in for it here.
		token := (h.index+1)*0x9e3779b97f4a7c15 ^ uint64(i+1)
		gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: id, ConsumerId: consumer, DeadlineMs: h.now + vis, LeaseToken: token})
	}
	return as[*GrantResult](h.t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: gs}}})).Deliveries
}

func ref(d *state.Delivery) *fsmv1.Ref {
	return &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken}
}

func (h *harness) ack(ds ...*state.Delivery) *ItemsResult {
	h.t.Helper()
	var refs []*fsmv1.Ref
	for _, d := range ds {
		refs = append(refs, ref(d))
	}
	return as[*ItemsResult](h.t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}}))
}

func (h *harness) nack(d *state.Delivery, delay int64, deadLetter bool) *ItemsResult {
	h.t.Helper()
	return as[*ItemsResult](h.t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), DelayMs: delay, DeadLetter: deadLetter}}}}}))
}

func (h *harness) tick() { h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}}) }

func (h *harness) info(q string) *state.QueueInfo {
	h.t.Helper()
	qi, err := h.f.Reader().GetQueue(q)
	if err != nil {
		h.t.Fatal(err)
	}
	return qi
}

// readyIDs returns what Peek would deliver now.
func (h *harness) readyIDs(q string) []string {
	h.t.Helper()
	ds, err := h.f.Reader().Peek(q, 1000, false)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}
