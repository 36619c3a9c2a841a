package state

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// slowMessageRecord is what the restore made of a record before the fast
// decoder: proto.Unmarshal, then the headers packed.
func slowMessageRecord(b []byte) (*fsmv1.MessageRecord, packedHeaders, error) {
	r := &fsmv1.MessageRecord{}
	if err := proto.Unmarshal(b, r); err != nil {
		return nil, "", err
	}
	h := packHeaders(r.Headers)
	r.Headers = nil
	return r, h, nil
}

func randomMessageRecord(rng *rand.Rand) *fsmv1.MessageRecord {
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return fmt.Sprintf("s%d-é", rng.IntN(1000))
	}
	r := &fsmv1.MessageRecord{
		Id: rng.Uint64(), Priority: rng.Int32() - 1<<30, FairnessKey: str(), Weight: rng.Uint32(),
		EnqueuedMs: rng.Int64() - 1<<62, VisibleMs: rng.Int64(), ExpiresMs: -rng.Int64(), Attempts: -rng.Int32(),
		LeaseToken: rng.Uint64(), ConsumerId: str(), DeadlineMs: rng.Int64(), OriginQueue: str(), DeadLetterReason: str(),
		DedupId: str(), State: fsmv1.MessageState(rng.IntN(5)), DeadLetteredMs: rng.Int64(), DeadLetteredIndex: rng.Uint64(),
		ConcurrencyKey: str(),
	}
	if rng.IntN(4) > 0 {
		r.Payload = make([]byte, rng.IntN(2000))
		for i := range r.Payload {
			r.Payload[i] = byte(rng.IntN(256))
		}
	}
	if n := rng.IntN(4); n > 0 {
		r.ThrottleKeys = make([]string, n)
		for i := range r.ThrottleKeys {
			r.ThrottleKeys[i] = str()
		}
	}
	if n := rng.IntN(5); n > 0 {
		r.Headers = map[string]string{}
		for range n {
			r.Headers[str()] = str()
		}
	}
	if rng.IntN(10) == 0 {
		r.Story = &fsmv1.MessageStory{}
	}
	return r
}

// TestFastRecordDecoders: the restore's decoders of message and dedup
// records give what proto.Unmarshal gives (and fail where it fails), for
// records Stream writes, records written in another field order or with
// map entries unsorted or repeated, and damaged ones.
func TestFastRecordDecoders(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 1))
	var inputs [][]byte
	for range 2000 {
		r := randomMessageRecord(rng)
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
		if b2, err := proto.Marshal(r); err == nil { // map entries in any order
			inputs = append(inputs, b2)
		}
		// Damaged: cut short, a byte changed, a field appended.
		if len(b) > 0 {
			inputs = append(inputs, b[:rng.IntN(len(b))])
			d := append([]byte(nil), b...)
			d[rng.IntN(len(d))] ^= byte(1 + rng.IntN(255))
			inputs = append(inputs, d)
		}
		inputs = append(inputs, protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), b...), 99, protowire.VarintType), 5))
	}
	entry := func(fields ...[]byte) []byte {
		var e []byte
		for _, f := range fields {
			e = append(e, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), e)
	}
	kv := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	join := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	inputs = append(inputs,
		nil,
		join(entry(kv(1, "b"), kv(2, "1")), entry(kv(1, "a"), kv(2, "2"))), // unsorted
		join(entry(kv(1, "a"), kv(2, "1")), entry(kv(1, "a"), kv(2, "2"))), // repeated key: the last wins
		join(entry(kv(2, "only a value"))),                                 // no key
		join(entry(kv(1, "only a key"))),                                   // no value
		join(entry()),                                                      // empty entry
		join(entry(kv(2, "v"), kv(1, "k"))),                                // value first
		join(entry(kv(1, "k"), kv(2, "v"), kv(3, "x"))),                    // unknown field in an entry
		join(entry(kv(1, "\xff"), kv(2, "v"))),                             // key not UTF-8
		join(kv(5, "\xfe")),                                                // string not UTF-8
		join(kv(2, "")),                                                    // empty payload
		join(protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)),            // wrong wire type
		join(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1<<63|5)),      // large varint
		join(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), kv(1, "")), // a field twice, types differing
		join(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 2)),
		join(kv(7, "a"), kv(7, ""), kv(7, "b")), // repeated throttle keys
		join(kv(21, "")),                        // an empty story
	)
	for i, b := range inputs {
		want, wantH, wantErr := slowMessageRecord(b)
		var got loadedMessage
		gotErr := decodeMessageRecord(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("input %d (%x): fast decoder error %v, proto.Unmarshal %v", i, b, gotErr, wantErr)
		}
		if wantErr != nil {
			continue
		}
		if !proto.Equal(&got.rec, want) || got.headers != wantH {
			t.Fatalf("input %d (%x): fast decoder gave %v, headers %q; proto.Unmarshal %v, headers %q", i, b, &got.rec, got.headers, want, wantH)
		}
		if (got.rec.Payload == nil) != (want.Payload == nil) || (got.rec.ThrottleKeys == nil) != (want.ThrottleKeys == nil) {
			t.Fatalf("input %d: nil and empty told apart differently", i)
		}
	}

	for range 2000 {
		de := &fsmv1.DedupEntry{DedupId: fmt.Sprint(rng.IntN(1e6)), MessageId: rng.Uint64(), ExpiresMs: rng.Int64() - 1<<62}
		b, _ := proto.Marshal(de)
		cases := [][]byte{b, b[:rng.IntN(len(b)+1)], kv(1, "\xff"), append(append([]byte(nil), b...), kv(9, "x")...)}
		for _, c := range cases {
			want := &fsmv1.DedupEntry{}
			wantErr := proto.Unmarshal(c, want)
			var got loadedDedup
			gotErr := decodeDedupEntry(c, &got)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("dedup %x: fast decoder error %v, proto.Unmarshal %v", c, gotErr, wantErr)
			}
			if wantErr != nil {
				continue
			}
			if w := dedupKey(want.DedupId); got.entry != (dedupEntry{hash: w.hash, dedupID: want.DedupId, messageID: want.MessageId, expiresMs: want.ExpiresMs}) {
				t.Fatalf("dedup %x: fast decoder gave %+v, proto.Unmarshal %v", c, got.entry, want)
			}
		}
	}
}

// TestRadixSortStable: the dedup expiry order's sort agrees with a stable
// sort, over keys that need every pass, some, or none.
func TestRadixSortStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 2))
	type item struct {
		key uint64
		pos int
	}
	for _, mask := range []uint64{0, 0xff, 0xffff0000, 1<<40 | 7, ^uint64(0)} {
		for _, n := range []int{0, 1, 2, 100, 5000} {
			items := make([]item, n)
			for i := range items {
				items[i] = item{key: rng.Uint64() & mask, pos: i}
				if i > 0 && rng.IntN(4) == 0 {
					items[i].key = items[i-1].key // ties, kept in order
				}
			}
			want := slices.Clone(items)
			slices.SortStableFunc(want, func(a, b item) int { return cmp.Compare(a.key, b.key) })
			radixSortStable(items, func(it item) uint64 { return it.key })
			if !slices.Equal(items, want) {
				t.Fatalf("mask %x, %d items: radix sort differs from a stable sort", mask, n)
			}
		}
	}
}

// TestDedupExpiryOrder: entries are ordered by expiry, then id, in
// snapshot order among equals, whatever their expiries and ids span
// (negative expiries among them).
func TestDedupExpiryOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 3))
	for _, span := range []int64{10, 1 << 20, 1 << 40, 1 << 62} {
		var es dedupChunks
		for i := range 3*dedupChunk + 5 {
			es.add(dedupEntry{dedupID: fmt.Sprint(i), expiresMs: 1_700_000_000_000 - span/2 + rng.Int64N(span), messageID: uint64(rng.Int64N(span))})
		}
		order := dedupExpiryOrder(&es)
		if len(order) != es.n {
			t.Fatalf("span %d: %d positions for %d entries", span, len(order), es.n)
		}
		for i := 1; i < len(order); i++ {
			a, b := es.at(int(order[i-1])), es.at(int(order[i]))
			if c := cmp.Or(cmp.Compare(a.expiresMs, b.expiresMs), cmp.Compare(a.messageID, b.messageID)); c > 0 || c == 0 && order[i-1] > order[i] {
				t.Fatalf("span %d: out of order at %d", span, i)
			}
		}
	}
}
