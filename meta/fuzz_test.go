package meta

import (
	"testing"

	"github.com/hashicorp/raft"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzDecode: Decode never panics; what it accepts re-encodes to a
// command that decodes equal, and applies (to a fresh FSM and to a seeded
// one) without panicking, to the same answer and digest on two replicas.
func FuzzDecode(f *testing.F) {
	for _, b := range randomLog(3, 60) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		again, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Decode(again)
		if err != nil || !proto.Equal(c, c2) {
			t.Fatalf("re-decode: %v", err)
		}
		for _, start := range [][]byte{nil, mustEncode(t, emptySeed())} {
			x, y := New(Options{}), New(Options{})
			var i uint64
			for _, e := range [][]byte{start, b} {
				if e == nil {
					continue
				}
				i++
				ax := answer(x.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: e}).(*Result))
				ay := answer(y.Apply(&raft.Log{Index: i, Type: raft.LogCommand, Data: e}).(*Result))
				if ax != ay || x.Digest() != y.Digest() {
					t.Fatalf("replicas differ: %s / %s", ax, ay)
				}
			}
			if restored(t, x).Digest() != x.Digest() {
				t.Fatal("restored digest differs")
			}
		}
	})
}

func mustEncode(t *testing.T, c *metav1.Command) []byte {
	t.Helper()
	b, err := Encode(c, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
