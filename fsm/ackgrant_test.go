package fsm

import (
	"errors"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// ackWithGrants is an Ack entry carrying grants (log version 10).
func ackWithGrants(refs []*fsmv1.Ref, grants ...*fsmv1.Grant) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs, Grants: grants}}}
}

// TestAckCarriesGrantsFromVersion10: an Ack's grants apply, after its
// acks and in the same entry, only in entries of version 10 or later;
// before that the field is ignored, as builds before version 10 ignore
// it, and the entry answers as a plain Ack.
func TestAckCarriesGrantsFromVersion10(t *testing.T) {
	for _, v := range []uint32{AckGrantVersion - 2, AckGrantVersion - 1, AckGrantVersion} {
		h := newHarness(t)
		h.raise(v)
		h.create("q", nil)
		ids := h.enqueuePayloads("q", "a", "b", "c")
		d := h.grant("q", "c1", 1000, ids[0])[0]
		g := &fsmv1.Grant{Queue: "q", MessageId: ids[1], ConsumerId: "c1", DeadlineMs: h.now + 2000, LeaseToken: 77}
		res := h.apply(ackWithGrants([]*fsmv1.Ref{ref(d)}, g))
		st := h.info("q").Stats
		if v < AckGrantVersion {
			ir := as[*ItemsResult](t, res)
			if len(ir.Items) != 1 || ir.Items[0] != nil || st.Ready != 2 || st.InFlight != 0 {
				t.Fatalf("version %d: items %v, stats %+v; want the ack alone applied", v, ir.Items, st)
			}
			continue
		}
		ag := as[*AckGrantResult](t, res)
		if len(ag.Acked.Items) != 1 || ag.Acked.Items[0] != nil {
			t.Fatalf("acks: %v", ag.Acked.Items)
		}
		if len(ag.Granted.Items) != 1 || ag.Granted.Items[0] != nil {
			t.Fatalf("grants: %v", ag.Granted.Items)
		}
		got := ag.Granted.Deliveries[0]
		if got.ID != ids[1] || got.Attempt != 1 || got.LeaseToken != 77 || got.LeaseDeadlineMs != h.now+2000 {
			t.Fatalf("delivery %+v", got)
		}
		if st.Ready != 1 || st.InFlight != 1 || st.AckedTotal != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
}

// TestAckGrantIsAckThenGrant: an Ack carrying grants leaves the state a
// LeaseGrant entry right after the Ack would, item errors included: the
// acks apply first (a grant of a message acked in the same entry finds
// nothing), and each grant is judged as LeaseGrant judges it.
func TestAckGrantIsAckThenGrant(t *testing.T) {
	setup := func() (*harness, []uint64, []*fsmv1.Ref) {
		h := newHarness(t)
		h.raise(AckGrantVersion)
		h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 3})
		ids := h.enqueuePayloads("q", "a", "b", "c", "d", "e")
		ds := h.grant("q", "c1", 1000, ids[0], ids[1])
		return h, ids, []*fsmv1.Ref{ref(ds[0]), ref(ds[1]), {Queue: "q", MessageId: ids[2], LeaseToken: 5}}
	}
	grants := func(ids []uint64, now int64) []*fsmv1.Grant {
		return []*fsmv1.Grant{
			{Queue: "q", MessageId: ids[2], ConsumerId: "c1", DeadlineMs: now + 500, LeaseToken: 11}, // ready: granted
			{Queue: "q", MessageId: ids[0], ConsumerId: "c1", DeadlineMs: now + 500, LeaseToken: 12}, // acked just before
			{Queue: "q", MessageId: ids[3], ConsumerId: "", DeadlineMs: now + 500, LeaseToken: 13},   // no consumer
			{Queue: "q", MessageId: ids[4], ConsumerId: "c2", DeadlineMs: now + 500},                 // no token
			{Queue: "nope", MessageId: ids[4], ConsumerId: "c2", DeadlineMs: now + 500, LeaseToken: 14},
		}
	}
	one, ids, refs := setup()
	ag := as[*AckGrantResult](t, one.apply(ackWithGrants(refs, grants(ids, one.now)...)))

	two, ids2, refs2 := setup()
	acked := as[*ItemsResult](t, two.apply(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs2}}}))
	granted := as[*GrantResult](t, two.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: grants(ids2, two.now)}}}))

	sameErrs := func(what string, a, b []error) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: %d items vs %d", what, len(a), len(b))
		}
		for i := range a {
			if (a[i] == nil) != (b[i] == nil) || (a[i] != nil && a[i].Error() != b[i].Error()) {
				t.Fatalf("%s %d: %v, separately %v", what, i, a[i], b[i])
			}
		}
	}
	sameErrs("ack", ag.Acked.Items, acked.Items)
	sameErrs("grant", ag.Granted.Items, granted.Items)
	if !errors.Is(ag.Acked.Items[2], ErrStaleLease) || !errors.Is(ag.Granted.Items[1], ErrMessageNotFound) ||
		!errors.Is(ag.Granted.Items[2], ErrStaleLease) || !errors.Is(ag.Granted.Items[3], ErrInvalid) || !errors.Is(ag.Granted.Items[4], ErrQueueNotFound) {
		t.Fatalf("item errors: acks %v, grants %v", ag.Acked.Items, ag.Granted.Items)
	}
	if d := ag.Granted.Deliveries[0]; d == nil || d.ID != ids[2] || d.Attempt != 1 {
		t.Fatalf("delivery %+v", d)
	}
	if a, b := stateDigest(t, one.f), stateDigest(t, two.f); a != b {
		t.Fatalf("one entry %s, two entries %s", a, b)
	}
}
