package fsm

import (
	"bytes"
	"io"
	"slices"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protodelim"
)

func msg(payload, key string, prio int32, weight uint32) *fsmv1.EnqueueMessage {
	return &fsmv1.EnqueueMessage{Payload: []byte(payload), FairnessKey: key, Priority: prio, Weight: weight}
}

// restoredCopy is a replica that installed a snapshot of h's state: a
// harness at the same index, clock and version, so both can go on with
// the same log.
func restoredCopy(t *testing.T, h *harness) *harness {
	t.Helper()
	f := New(Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if err := f.Integrity().Verify(); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, f: f, index: h.index, now: h.now, version: h.version}
}

// keyOrderScenario builds, at two priorities, the states a restore used
// to get wrong: a key that became active again after a newer key (its
// older message came back from a lease), and a key whose weight came from
// a message no longer ready (granted past the key's head, as a throttled
// pass does).
func keyOrderScenario(hs ...*harness) {
	for _, h := range hs {
		h.create("q", nil)
		for _, p := range []int32{0, 5} {
			pre := string(rune('A' + p))
			// Activation: a's message is leased when b becomes active, and
			// comes back after: live order b, a; id order a, b.
			ids := h.enqueue("q", msg(pre+"a1", "a", p, 1))
			d := h.grant("q", "c", 1000, ids[0])[0]
			h.enqueue("q", msg(pre+"b1", "b", p, 1), msg(pre+"b2", "b", p, 1))
			h.nack(d, 0, false)
			// Weight: w's newest message (weight 3) is granted; the key keeps
			// delivering at 3 although its ready messages say 1.
			ws := h.enqueue("q", msg(pre+"w1", "w", p, 1), msg(pre+"w2", "w", p, 1), msg(pre+"w3", "w", p, 1), msg(pre+"w4", "w", p, 3))
			h.grant("q", "c", 1000, ws[3])
			h.enqueue("q", msg(pre+"z1", "z", p, 1), msg(pre+"z2", "z", p, 1))
		}
	}
}

// TestRestoredReplicaDeliversInLiveOrder: from cluster version 3 a replica
// that installed a snapshot delivers (Peek, the order a fresh scheduler
// would grant) exactly as the live one, across fairness keys, weights and
// priorities, and keeps doing so as the log goes on; the digest covers
// what decides that order.
func TestRestoredReplicaDeliversInLiveOrder(t *testing.T) {
	live := newHarness(t)
	live.raise(3)
	keyOrderScenario(live)
	// The live order, spelled out: priority 5 first; b (active before a
	// came back), then a, w at weight 3, z.
	want := []string{"Fb1", "Fa1", "Fw1", "Fw2", "Fw3", "Fz1", "Fb2", "Fz2", "Ab1", "Aa1", "Aw1", "Aw2", "Aw3", "Az1", "Ab2", "Az2"}
	if got := live.readyIDs("q"); !slices.Equal(got, want) {
		t.Fatalf("live order %q, want %q", got, want)
	}
	restored := restoredCopy(t, live)
	if got := restored.readyIDs("q"); !slices.Equal(got, want) {
		t.Fatalf("restored replica delivers %q, the live one %q", got, want)
	}
	if a, b := digestOf(t, live.f), digestOf(t, restored.f); a != b {
		t.Fatalf("digests differ after restore: %s %s", a, b)
	}

	// The log goes on: a new key, a heavier message on a, a returning
	// older message (which must not change w's weight), a key emptied
	// and refilled.
	for _, h := range []*harness{live, restored} {
		h.enqueue("q", msg("Fn1", "n", 5, 2), msg("Fa2", "a", 5, 2))
		ready, _ := h.f.Reader().Peek("q", 100, false)
		var w1, z1, z2 uint64
		for _, d := range ready {
			switch string(d.Payload) {
			case "Fw1":
				w1 = d.ID
			case "Fz1":
				z1 = d.ID
			case "Fz2":
				z2 = d.ID
			}
		}
		dw := h.grant("q", "c", 1000, w1)[0]
		h.ack(h.grant("q", "c", 1000, z1, z2)...)
		h.nack(dw, 0, false)
		h.enqueue("q", msg("Fz3", "z", 5, 1))
	}
	if a, b := live.readyIDs("q"), restored.readyIDs("q"); !slices.Equal(a, b) {
		t.Fatalf("after more entries the restored replica delivers %q, the live one %q", b, a)
	}
	if a, b := digestOf(t, live.f), digestOf(t, restored.f); a != b {
		t.Fatalf("digests differ after more entries: %s %s", a, b)
	}
	// And a snapshot of the restored replica restores the same again.
	if a, b := live.readyIDs("q"), restoredCopy(t, restored).readyIDs("q"); !slices.Equal(a, b) {
		t.Fatalf("second restore delivers %q, live %q", b, a)
	}
}

// TestKeyOrderInDigest: from cluster version 3 two states that differ only
// in key order or weight have different digests; before it, the snapshot
// is the older format, without key order, byte for byte.
func TestKeyOrderInDigest(t *testing.T) {
	build := func(version uint32, aFirst bool) *harness {
		h := newHarness(t)
		if version > 1 {
			h.raise(version)
		}
		h.create("q", nil)
		ids := h.enqueue("q", msg("a1", "a", 0, 1), msg("b1", "b", 0, 1))
		// Lease both and return them in either order: same messages, the
		// keys active in a different order.
		ds := h.grant("q", "c", 1000, ids...)
		if aFirst {
			h.nack(ds[0], 0, false)
			h.nack(ds[1], 0, false)
		} else {
			h.nack(ds[1], 0, false)
			h.nack(ds[0], 0, false)
		}
		return h
	}
	if a, b := build(3, true), build(3, false); digestOf(t, a.f) == digestOf(t, b.f) {
		t.Fatalf("key orders %q and %q have one digest", a.readyIDs("q"), b.readyIDs("q"))
	}
	for _, v := range []uint32{1, 2} {
		h := build(v, true)
		snap := snapshotBytes(t, h.f)
		r := bytes.NewReader(snap)
		hdr := &fsmv1.SnapshotHeader{}
		if err := protodelim.UnmarshalFrom(r, hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Version != v {
			t.Fatalf("cluster version %d wrote snapshot format %d", v, hdr.Version)
		}
		for range hdr.QueueCount {
			rec := &fsmv1.QueueRecord{}
			if err := protodelim.UnmarshalFrom(r, rec); err != nil {
				t.Fatal(err)
			}
			if len(rec.KeyOrder) > 0 {
				t.Fatalf("cluster version %d wrote key order into the snapshot", v)
			}
			for range rec.MessageCount + rec.DedupCount {
				if err := protodelim.UnmarshalFrom(r, &fsmv1.MessageRecord{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestRaisingToVersion3MakesKeyOrderCanonical: replicas whose key order
// diverged under the older rule (one restored from a version-2 snapshot,
// one live) agree on order and digest once the cluster reaches version 3.
func TestRaisingToVersion3MakesKeyOrderCanonical(t *testing.T) {
	live := newHarness(t)
	live.raise(2)
	keyOrderScenario(live)
	restored := restoredCopy(t, live)
	if slices.Equal(live.readyIDs("q"), restored.readyIDs("q")) {
		t.Fatal("scenario does not diverge under version 2; it tests nothing")
	}
	for _, h := range []*harness{live, restored} {
		h.raise(3)
	}
	if a, b := live.readyIDs("q"), restored.readyIDs("q"); !slices.Equal(a, b) {
		t.Fatalf("after raising to 3: live %q, restored %q", a, b)
	}
	if a, b := digestOf(t, live.f), digestOf(t, restored.f); a != b {
		t.Fatalf("digests differ after raising to 3")
	}
}
