package state

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protodelim"
)

// seeded returns a store with a queue holding ready, delayed and leased
// messages and dedup entries, and the index of its last entry.
func seeded(t *testing.T) (*Store, uint64) {
	t.Helper()
	s := New()
	touched := NewTouched()
	if r := s.Begin(1, 1, 1, 1000, touched).CreateQueue(&fsmv1.CreateQueue{Name: "q"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	enq := s.Begin(2, 1, 1, 1001, touched).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: []*fsmv1.EnqueueMessage{
		{Payload: []byte("a"), DedupId: "x"}, {Payload: []byte("b"), DelayMs: 500}, {Payload: []byte("c"), FairnessKey: "k"},
	}}}})
	if enq.Err != nil || enq.Batches[0].Err != nil {
		t.Fatal(enq.Err, enq.Batches[0].Err)
	}
	g := s.Begin(3, 1, 1, 1002, touched).Grant(&fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{{Queue: "q", MessageId: enq.Batches[0].IDs[0], ConsumerId: "c", DeadlineMs: 5000}}})
	if g.Err != nil || g.Items[0] != nil {
		t.Fatal(g.Err, g.Items[0])
	}
	for i := uint64(1); i <= 3; i++ {
		s.SetApplied(i)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := touched.List(); len(got) != 1 || got[0] != "q" {
		t.Fatalf("touched %v", got)
	}
	return s, 3
}

// TestFreezeIsPointInTime: a frozen copy does not see later writes (the
// trees are cloned copy-on-write and messages are never changed in place),
// and streaming it and loading the stream gives the same digest.
func TestFreezeIsPointInTime(t *testing.T) {
	s, idx := seeded(t)
	fr := s.Freeze(idx)
	before, err := fr.Digest()
	if err != nil {
		t.Fatal(err)
	}
	tx := s.Begin(idx+1, 1, 1, 2000, NewTouched())
	if r := tx.Ack([]*fsmv1.Ref{{Queue: "q", MessageId: 2 << 20, LeaseToken: 3 << 20}}); r.Err != nil || r.Items[0] != nil {
		t.Fatalf("ack: %v %v", r.Err, r.Items)
	}
	tx.Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: []*fsmv1.EnqueueMessage{{Payload: []byte("d")}}}}})
	if after, _ := fr.Digest(); after != before {
		t.Fatal("a frozen copy changed with later writes")
	}
	if now, _ := s.Freeze(idx).Digest(); now == before {
		t.Fatal("the writes after the freeze changed nothing")
	}
	var buf bytes.Buffer
	if err := fr.Stream(&buf); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(bufio.NewReader(&buf))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := loaded.Freeze(loaded.AppliedIndex()).Digest(); got != before {
		t.Fatalf("loaded digest %s, frozen %s", got, before)
	}
}

// TestVerifyCatchesDrift: a counter that disagrees with the structures is
// reported (the chokepoint keeps them equal; Verify proves it).
func TestVerifyCatchesDrift(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drift func(s *Store)
	}{
		{"ready", func(s *Store) { s.queues["q"].ready++ }},
		{"in flight", func(s *Store) { s.queues["q"].inFlight-- }},
		{"bytes", func(s *Store) { s.totalBytes += 3 }},
		{"delay index", func(s *Store) { s.delayed.Clear(false) }},
		{"consumer index", func(s *Store) { delete(s.consumers, "c") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := seeded(t)
			tc.drift(s)
			if err := s.Verify(); err == nil {
				t.Fatal("Verify missed the drift")
			}
		})
	}
}

// TestLoadRefusesNewerFormat: a snapshot of a format newer than this build
// reads is ErrNewerVersion, not a guess.
func TestLoadRefusesNewerFormat(t *testing.T) {
	var buf bytes.Buffer
	if _, err := protodelim.MarshalTo(&buf, &fsmv1.SnapshotHeader{Version: maxSnapshotVersion + 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bufio.NewReader(&buf)); !errors.Is(err, ErrNewerVersion) {
		t.Fatalf("Load: %v, want ErrNewerVersion", err)
	}
}

// TestMessageRecordSize: a queued message's record stays in the 96-byte
// size class (issue 15 and 24: memory per message); content few messages
// carry sits behind pointers that are nil for the rest.
func TestMessageRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(message{}); n > 96 {
		t.Fatalf("message record is %d bytes, want at most 96", n)
	}
	// What only leased, delayed or dead-lettered messages have.
	if n := unsafe.Sizeof(more{}); n > 48 {
		t.Fatalf("more is %d bytes, want at most 48", n)
	}
	// A message with headers has a body of its own (issue 24): its keys
	// are shared, not in it.
	if n := unsafe.Sizeof(body{}); n > 24 {
		t.Fatalf("body is %d bytes, want at most 24", n)
	}
}

// TestSharedBodies: consecutive messages of a fairness key with the same
// keys and no headers share one body, those with headers share the keys,
// and every message still reads back exactly its own content (headers,
// keys, nil and empty told apart).
func TestSharedBodies(t *testing.T) {
	s := New()
	if r := s.Begin(1, 1, 1, 1000, NewTouched()).CreateQueue(&fsmv1.CreateQueue{Name: "q"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	msgs := []*fsmv1.EnqueueMessage{
		{Payload: []byte("0"), FairnessKey: "a", ThrottleKeys: []string{"t"}},
		{Payload: []byte("1"), FairnessKey: "a", ThrottleKeys: []string{"t"}},
		{Payload: []byte("2"), FairnessKey: "a", ThrottleKeys: []string{"t"}, Headers: map[string]string{"h": "v"}},
		{Payload: []byte("3"), FairnessKey: "a", ThrottleKeys: []string{"t", "u"}},
		{Payload: []byte("4"), FairnessKey: "a", ThrottleKeys: []string{}},
		{Payload: []byte("5"), FairnessKey: "a"},
		{Payload: []byte("6"), FairnessKey: "b", ThrottleKeys: []string{"t"}},
		{Payload: []byte("7"), Headers: map[string]string{}},
		{Payload: []byte("8"), FairnessKey: "a", ThrottleKeys: []string{"t"}, Priority: 1},
		{Payload: []byte("9"), FairnessKey: "a"},
	}
	enq := s.Begin(2, 1, 1, 1001, NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}})
	if enq.Err != nil || enq.Batches[0].Err != nil {
		t.Fatal(enq.Err, enq.Batches[0].Err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	q := s.queues["q"]
	ids := enq.Batches[0].IDs
	if q.get(ids[0]).body != q.get(ids[1]).body {
		t.Error("messages 0 and 1 (same keys, no headers) do not share a body")
	}
	if q.get(ids[5]).body != q.get(ids[9]).body {
		t.Error("messages 5 and 9 (same keys, no headers) do not share a body")
	}
	if m0, m2 := q.get(ids[0]), q.get(ids[2]); m2.body == m0.body || m2.keys() != m0.keys() {
		t.Error("message 2 (message 0's keys, headers) shares message 0's body, or not its keys")
	}
	for i, em := range msgs {
		m := q.get(ids[i])
		if string(m.payload) != string(em.Payload) {
			t.Fatalf("message %d: payload %q", i, m.payload)
		}
		if m.fairnessKey() != em.FairnessKey || m.priority != em.Priority {
			t.Errorf("message %d: fairness key %q priority %d, want %q %d", i, m.fairnessKey(), m.priority, em.FairnessKey, em.Priority)
		}
		if got := m.throttleKeys(); (got == nil) != (em.ThrottleKeys == nil) || !slices.Equal(got, em.ThrottleKeys) {
			t.Errorf("message %d: throttle keys %#v, want %#v", i, got, em.ThrottleKeys)
		}
		if got := m.headers(); (got == nil) != (em.Headers == nil) || !maps.Equal(got, em.Headers) {
			t.Errorf("message %d: headers %#v, want %#v", i, got, em.Headers)
		}
	}
}

// TestSoleGroupIsTheKeysIDs: a fairness key whose ready messages are all
// of one throttle group keeps one tree of their ids, not two (issue 24);
// a second group gives the first a tree of its own, and each group still
// holds exactly its messages, as the messages leave too.
func TestSoleGroupIsTheKeysIDs(t *testing.T) {
	s := New()
	if r := s.Begin(1, 1, 1, 1000, NewTouched()).CreateQueue(&fsmv1.CreateQueue{Name: "q"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	enqueue := func(index uint64, msgs ...*fsmv1.EnqueueMessage) []uint64 {
		t.Helper()
		r := s.Begin(index, 1, 1, 1000+int64(index), NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}})
		if r.Err != nil || r.Batches[0].Err != nil {
			t.Fatal(r.Err, r.Batches[0].Err)
		}
		if err := s.Verify(); err != nil {
			t.Fatal(err)
		}
		return r.Batches[0].IDs
	}
	plain := enqueue(2, &fsmv1.EnqueueMessage{Payload: []byte("a")}, &fsmv1.EnqueueMessage{Payload: []byte("b")})
	kq := s.queues["q"].levels[0].keys[""]
	if kq.groups[""] != kq.ids {
		t.Fatal("a key's only group is a tree of its own")
	}
	throttled := enqueue(3, &fsmv1.EnqueueMessage{Payload: []byte("c"), ThrottleKeys: []string{"t"}})
	plain = append(plain, enqueue(4, &fsmv1.EnqueueMessage{Payload: []byte("d")})...)
	if kq.groups[""] == kq.ids {
		t.Fatal("with a second group the first is still the key's ids")
	}
	ids := func(g string) (out []uint64) {
		if gt := kq.groups[g]; gt != nil {
			gt.Ascend(func(id uint64) bool { out = append(out, id); return true })
		}
		return out
	}
	if got := ids(""); !slices.Equal(got, plain) {
		t.Errorf("group \"\" holds %v, want %v", got, plain)
	}
	if got := ids("t"); !slices.Equal(got, throttled) {
		t.Errorf("group t holds %v, want %v", got, throttled)
	}
	if kq.ids.Len() != 4 {
		t.Errorf("the key holds %d ids, want 4", kq.ids.Len())
	}
	// Messages leave through the same chokepoint (put): the groups follow.
	q := s.queues["q"]
	for _, id := range []uint64{plain[0], throttled[0]} {
		m := q.get(id)
		next := *m
		next.state = stateDelayed
		next.setVisible(5000)
		s.put(q, m, &next)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := ids(""); !slices.Equal(got, plain[1:]) {
		t.Errorf("group \"\" holds %v, want %v", got, plain[1:])
	}
	if _, ok := kq.groups["t"]; ok {
		t.Error("an emptied group is kept")
	}
}

// TestSharedHeaders: the headers a message has in common with the
// previous message of its key (same key, same value) are shared with it,
// the others are its own, and every message reads back exactly its
// headers (random header sets drawn from few keys and values, so that
// messages agree on some and differ on others; an empty map and none
// among them), in its record and its cost too.
func TestSharedHeaders(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 1))
	s := New()
	if res := s.Begin(1, 1, 1, 1000, NewTouched()).CreateQueue(&fsmv1.CreateQueue{Name: "q"}); res.Err != nil {
		t.Fatal(res.Err)
	}
	var msgs []*fsmv1.EnqueueMessage
	for i := range 400 {
		em := &fsmv1.EnqueueMessage{Payload: []byte{byte(i)}}
		switch r.IntN(10) {
		case 0: // none
		case 1:
			em.Headers = map[string]string{}
		default:
			em.Headers = map[string]string{}
			for range r.IntN(5) {
				em.Headers[fmt.Sprint("k", r.IntN(4))] = fmt.Sprint("v", r.IntN(3))
			}
		}
		if r.IntN(8) == 0 {
			em.FairnessKey = "f"
		}
		msgs = append(msgs, em)
	}
	enq := s.Begin(2, 1, 1, 1001, NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}})
	if enq.Err != nil || enq.Batches[0].Err != nil {
		t.Fatal(enq.Err, enq.Batches[0].Err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	q := s.queues["q"]
	shared := 0
	for i, em := range msgs {
		m := q.get(enq.Batches[0].IDs[i])
		if got := m.headers(); (got == nil) != (em.Headers == nil) || !maps.Equal(got, em.Headers) {
			t.Fatalf("message %d: headers %#v, want %#v", i, got, em.Headers)
		}
		if got, want := m.headerCost(), packHeaders(em.Headers).cost(); got != want {
			t.Fatalf("message %d: header cost %d, want %d", i, got, want)
		}
		if got := m.fairnessKey(); got != em.FairnessKey {
			t.Fatalf("message %d: fairness key %q, want %q", i, got, em.FairnessKey)
		}
		if m.body != nil && m.body.shared.commonHeaders() != "" {
			shared++
			own := m.body.headers.into(nil)
			for k, v := range m.body.shared.commonHeaders().into(nil) {
				if _, dup := own[k]; dup {
					t.Fatalf("message %d: header %q both its own and shared", i, k)
				}
				if em.Headers[k] != v {
					t.Fatalf("message %d: shared header %q = %q, its own is %q", i, k, v, em.Headers[k])
				}
			}
		}
	}
	if shared < len(msgs)/10 { // 52 with this seed
		t.Errorf("%d of %d messages share headers", shared, len(msgs))
	}
	// Two messages that differ in one header of two share the other.
	two := enqueueHeaders(t, s, 3, map[string]string{"content-type": "json", "trace": "1"}, map[string]string{"content-type": "json", "trace": "2"}, map[string]string{"content-type": "json", "trace": "3"})
	if a, b := q.get(two[1]), q.get(two[2]); a.body.shared == nil || a.body.shared != b.body.shared || a.body.headers == b.body.headers {
		t.Error("messages 2 and 3 do not share their content type, or share their trace id")
	}
}

func enqueueHeaders(t *testing.T, s *Store, index uint64, hs ...map[string]string) []uint64 {
	t.Helper()
	var msgs []*fsmv1.EnqueueMessage
	for _, h := range hs {
		msgs = append(msgs, &fsmv1.EnqueueMessage{Payload: []byte("p"), Headers: h})
	}
	r := s.Begin(index, 1, 1, 1000+int64(index), NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}})
	if r.Err != nil || r.Batches[0].Err != nil {
		t.Fatal(r.Err, r.Batches[0].Err)
	}
	return r.Batches[0].IDs
}
