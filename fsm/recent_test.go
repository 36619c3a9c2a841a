package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func ackCmd(refs ...*fsmv1.Ref) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}}
}

func nackCmd(deadLetter bool, refs ...*fsmv1.Ref) *fsmv1.Command {
	items := make([]*fsmv1.NackOne, len(refs))
	for i, r := range refs {
		items[i] = &fsmv1.NackOne{Ref: r, DeadLetter: deadLetter}
	}
	return &fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: items}}}
}

func purgeCmd(q, key string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: q, IdempotencyKey: key}}}
}

func redriveCmd(q, key string) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: q, IdempotencyKey: key}}}
}

func leaseRef(d *state.Delivery) *fsmv1.Ref {
	return &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken}
}

// TestRetriedSettleAnswersOK: an ack or nack retried after its first
// answer was lost (the entry applied, the client never heard) answers OK
// from log version 7 and changes nothing; version 6 judged it afresh and
// answered an error, which is what the SDK's retry of UNAVAILABLE turned
// a success into. A retry the other way (ack of a nacked token) is still
// refused.
func TestRetriedSettleAnswersOK(t *testing.T) {
	for _, tc := range []struct {
		version uint32
		retryOK bool
	}{{6, false}, {7, true}} {
		t.Run(fmtVersion(tc.version), func(t *testing.T) {
			h := newHarness(t)
			h.raise(tc.version)
			h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 5})
			ids := h.enqueuePayloads("q", "a", "b")
			ds := h.grant("q", "c1", 30_000, ids...)
			acked, nacked := leaseRef(ds[0]), leaseRef(ds[1])
			h.mustOK(ackCmd(acked))
			h.mustOK(nackCmd(false, nacked))
			// b is ready again; lease it anew so that a double nack would
			// show (a second return would count another attempt).
			again := h.grant("q", "c2", 30_000, ids[1])[0]
			info, _ := h.f.Reader().GetQueue("q")

			ack := as[*ItemsResult](t, h.apply(ackCmd(acked))).Items[0]
			nack := as[*ItemsResult](t, h.apply(nackCmd(false, nacked))).Items[0]
			if tc.retryOK {
				if ack != nil || nack != nil {
					t.Fatalf("retried ack: %v, retried nack: %v; want both OK", ack, nack)
				}
			} else if !errors.Is(ack, ErrMessageNotFound) || !errors.Is(nack, ErrStaleLease) {
				t.Fatalf("version %d: retried ack %v, nack %v; want the old errors", tc.version, ack, nack)
			}
			after, _ := h.f.Reader().GetQueue("q")
			if after.Stats.AckedTotal != info.Stats.AckedTotal || after.Stats.NackedTotal != info.Stats.NackedTotal || after.Stats.InFlight != 1 {
				t.Fatalf("retries changed the counters: %+v -> %+v", info.Stats, after.Stats)
			}
			// The other outcome for a settled token stays an error, and the
			// live lease is untouched by any of it.
			if err := as[*ItemsResult](t, h.apply(ackCmd(nacked))).Items[0]; !errors.Is(err, ErrStaleLease) {
				t.Fatalf("ack of a nacked token: %v, want stale", err)
			}
			h.mustOK(ackCmd(leaseRef(again)))
		})
	}
}

func fmtVersion(v uint32) string { return fmt.Sprint("version", v) }

// TestIdempotentPurgeAndRedrive: a purge or redrive repeated with its
// idempotency key answers the first count and changes nothing from
// version 7; without a key, or at version 6, it runs again.
func TestIdempotentPurgeAndRedrive(t *testing.T) {
	for _, tc := range []struct {
		version uint32
		key     string
		once    bool
	}{{6, "k1", false}, {7, "", false}, {7, "k1", true}} {
		t.Run(fmtVersion(tc.version)+"/key="+tc.key, func(t *testing.T) {
			h := newHarness(t)
			h.raise(tc.version)
			h.create("q", nil)
			h.enqueuePayloads("q", "a", "b")
			if n := as[*CountResult](t, h.mustOK(purgeCmd("q", tc.key))).Count; n != 2 {
				t.Fatalf("purged %d, want 2", n)
			}
			h.enqueuePayloads("q", "c") // arrives between the purge and its retry
			n := as[*CountResult](t, h.mustOK(purgeCmd("q", tc.key))).Count
			info, _ := h.f.Reader().GetQueue("q")
			if tc.once && (n != 2 || info.Stats.Ready != 1) {
				t.Fatalf("retried purge answered %d and left %d ready; want 2 and 1", n, info.Stats.Ready)
			}
			if !tc.once && (n != 1 || info.Stats.Ready != 0) {
				t.Fatalf("second purge answered %d and left %d ready; want 1 and 0", n, info.Stats.Ready)
			}

			// Redrive: one message in the DLQ, redriven; another arrives
			// there before the retry.
			deadLetter := func(p string) {
				id := h.enqueuePayloads("q", p)
				d := h.grant("q", "c", 30_000, id...)
				h.mustOK(nackCmd(true, leaseRef(d[0])))
			}
			h.mustOK(purgeCmd("q", "")) // empty q for the count below
			deadLetter("x")
			if n := as[*CountResult](t, h.mustOK(redriveCmd("q", tc.key))).Count; n != 1 {
				t.Fatalf("redrove %d, want 1", n)
			}
			deadLetter("y")
			n = as[*CountResult](t, h.mustOK(redriveCmd("q", tc.key))).Count
			info, _ = h.f.Reader().GetQueue("q")
			want := int64(1) // redriven by the retry too, or left in the DLQ
			if tc.once && (n != 1 || info.Stats.DeadLettered != want) {
				t.Fatalf("retried redrive answered %d and left %d dead-lettered; want 1 and 1", n, info.Stats.DeadLettered)
			}
			if !tc.once && (n != 1 || info.Stats.DeadLettered != 0) {
				t.Fatalf("second redrive answered %d and left %d dead-lettered; want 1 and 0", n, info.Stats.DeadLettered)
			}
		})
	}
}

// TestRecentOutcomesLapseAndTravel: the record of settled outcomes is
// state: counted in the queue's stats, carried by snapshots (a restored
// replica answers a retry as the live one, with the same digest), and
// forgotten RecentWindowMs after it was made, on every replica alike.
func TestRecentOutcomesLapseAndTravel(t *testing.T) {
	h := newHarness(t)
	h.raise(7)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a", "b", "c")
	ds := h.grant("q", "c1", 30_000, ids...)
	h.mustOK(ackCmd(leaseRef(ds[0]), leaseRef(ds[1])))
	h.mustOK(purgeCmd("q", "p1"))
	info, _ := h.f.Reader().GetQueue("q")
	if info.Stats.RecentSettled != 3 {
		t.Fatalf("recent_settled %d, want 3 (two acks, one purge)", info.Stats.RecentSettled)
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
		if err := as[*ItemsResult](t, h.apply(ackCmd(leaseRef(ds[0])))).Items[0]; err != nil {
			t.Fatalf("retried ack on a restored replica: %v", err)
		}
		h.index-- // apply the same entry to both replicas
	}
	h.index++
	h.f = live

	// Past the window the record is gone: a retry is judged afresh.
	h.now += state.RecentWindowMs
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}})
	if info, _ := h.f.Reader().GetQueue("q"); info.Stats.RecentSettled != 0 {
		t.Fatalf("recent_settled %d after the window, want 0", info.Stats.RecentSettled)
	}
	if err := as[*ItemsResult](t, h.apply(ackCmd(leaseRef(ds[0])))).Items[0]; !errors.Is(err, ErrMessageNotFound) {
		t.Fatalf("ack retried after the window: %v, want not found", err)
	}
}
