package state

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// TestPackedHeaders: packing keeps every header (empty keys and values,
// lengths that need several varint bytes, nil and empty told apart), and
// what a packed message counts and streams is what the map gave.
func TestPackedHeaders(t *testing.T) {
	long := strings.Repeat("v", 300)
	many := map[string]string{} // more keys than packHeaders sorts on the stack
	for i := range 12 {
		many[strings.Repeat("k", i+1)] = strings.Repeat("v", 30)
	}
	for _, h := range []map[string]string{
		many,
		nil,
		{},
		{"": ""},
		{"trace-id": "0123456789abcdef", "content-type": "application/json"},
		{"b": "2", "a": "1", "c": ""},
		{long: long, "k": long[:128]},
	} {
		p := packHeaders(h)
		got := p.into(nil)
		if (got == nil) != (h == nil) || !maps.Equal(got, h) {
			t.Errorf("%v: unpacked %#v", h, got)
		}
		if p.count() != len(h) {
			t.Errorf("%v: count %d", h, p.count())
		}
		if want := contentCost(0, h, "", nil, "", ""); p.cost() != want-contentCost(0, nil, "", nil, "", "") {
			t.Errorf("%v: cost %d, want %d", h, p.cost(), want)
		}
		scratch := map[string]string{"stale": "x"}
		if got := p.into(scratch); (got == nil) != (h == nil) || !maps.Equal(got, h) {
			t.Errorf("%v: into a reused map %#v", h, got)
		}

		// The snapshot record: byte for byte what the map made.
		m := &message{id: 7, payload: []byte("p"), body: newBody(h, "f", nil, ""), dedupID: "d"}
		var rec fsmv1.MessageRecord
		fillMessageRecord(&rec, m, map[string]string{"stale": "x"})
		want := &fsmv1.MessageRecord{Id: 7, Payload: []byte("p"), Headers: h, FairnessKey: "f", DedupId: "d"}
		opts := proto.MarshalOptions{Deterministic: true}
		a, err := opts.Marshal(&rec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := opts.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%v: record %x, want %x", h, a, b)
		}
		if m.size() != contentCost(1, h, "f", nil, "d", "") {
			t.Errorf("%v: size %d, want %d", h, m.size(), contentCost(1, h, "f", nil, "d", ""))
		}
	}
}
