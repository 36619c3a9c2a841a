package raftmux

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	long := strings.Repeat("g", MaxGroupIDLen)
	for _, tc := range []struct {
		name string
		in   []byte
		want Preamble
		err  error // nil: none; ErrBadPreamble or io.EOF
		rest int   // bytes Decode must leave unread
	}{
		{"append entries", []byte{0, 9, 9}, Preamble{Kind: KindLegacy, First: 0}, nil, 2},
		{"request vote", []byte{1}, Preamble{Kind: KindLegacy, First: 1}, nil, 0},
		{"install snapshot", []byte{2}, Preamble{Kind: KindLegacy, First: 2}, nil, 0},
		{"timeout now", []byte{3}, Preamble{Kind: KindLegacy, First: 3}, nil, 0},
		{"pre-vote", []byte{4, 1}, Preamble{Kind: KindLegacy, First: 4}, nil, 1},
		{"unknown byte goes to raft, as before", []byte{0x7F}, Preamble{Kind: KindLegacy, First: 0x7F}, nil, 0},
		{"leave", []byte{LeaveByte, 5}, Preamble{Kind: KindLeave}, nil, 1},
		{"group", append([]byte{PreambleByte, 4}, "meta"...), Preamble{Kind: KindGroup, Group: "meta"}, nil, 0},
		{"group, RPC after", append([]byte{PreambleByte, 1, 'g'}, 0, 1), Preamble{Kind: KindGroup, Group: "g"}, nil, 2},
		{"longest id", append([]byte{PreambleByte, MaxGroupIDLen}, long...), Preamble{Kind: KindGroup, Group: long}, nil, 0},
		{"empty", nil, Preamble{}, io.EOF, 0},
		{"no length", []byte{PreambleByte}, Preamble{}, ErrBadPreamble, 0},
		{"zero length", []byte{PreambleByte, 0, 'a'}, Preamble{}, ErrBadPreamble, 1},
		{"length over the bound", append([]byte{PreambleByte, MaxGroupIDLen + 1}, long+"g"...), Preamble{}, ErrBadPreamble, MaxGroupIDLen + 1},
		{"length 255", []byte{PreambleByte, 255}, Preamble{}, ErrBadPreamble, 0},
		{"id cut short", []byte{PreambleByte, 5, 'a', 'b'}, Preamble{}, ErrBadPreamble, 0},
		{"id with a slash", append([]byte{PreambleByte, 3}, "a/b"...), Preamble{}, ErrBadPreamble, 0},
		{"id dot-dot", append([]byte{PreambleByte, 2}, ".."...), Preamble{}, ErrBadPreamble, 0},
		{"id with a NUL", []byte{PreambleByte, 2, 'a', 0}, Preamble{}, ErrBadPreamble, 0},
		{"id with a space", append([]byte{PreambleByte, 3}, "a b"...), Preamble{}, ErrBadPreamble, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(tc.in)
			got, err := Decode(r)
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if r.Len() != tc.rest {
				t.Errorf("%d bytes left unread, want %d", r.Len(), tc.rest)
			}
		})
	}
}

func TestEncodeRefusesBadIDs(t *testing.T) {
	for _, id := range []string{"", ".", "..", "a/b", "é", strings.Repeat("x", MaxGroupIDLen+1)} {
		if _, err := Encode(id); !errors.Is(err, ErrBadPreamble) {
			t.Errorf("Encode(%q) = %v, want ErrBadPreamble", id, err)
		}
	}
}

func TestPreambleBytesOutsideRaftRPCTypes(t *testing.T) {
	// hashicorp/raft v1.7's RPC types are 0 (AppendEntries) to 4
	// (RequestPreVote); a later raft adding one would still be far below.
	for _, b := range []byte{LeaveByte, PreambleByte} {
		if b <= 4 {
			t.Errorf("0x%02x is a raft RPC type", b)
		}
	}
	if LeaveByte == PreambleByte {
		t.Error("leave and preamble bytes are the same")
	}
}

// FuzzDecode: Decode never panics, never reads past what it returns,
// and every group it names encodes back to the bytes it read.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{LeaveByte})
	f.Add(append([]byte{PreambleByte, 4}, "data"...))
	f.Add([]byte{PreambleByte, 255, 'a'})
	f.Add([]byte{PreambleByte, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		p, err := Decode(r)
		read := in[:len(in)-r.Len()]
		if err != nil {
			if p != (Preamble{}) {
				t.Fatalf("error %v with %+v", err, p)
			}
			return
		}
		switch p.Kind {
		case KindLegacy:
			if len(read) != 1 || read[0] != p.First || p.First == LeaveByte || p.First == PreambleByte {
				t.Fatalf("legacy %+v from %x", p, read)
			}
		case KindLeave:
			if !bytes.Equal(read, []byte{LeaveByte}) {
				t.Fatalf("leave from %x", read)
			}
		case KindGroup:
			b, err := Encode(p.Group)
			if err != nil || !bytes.Equal(b, read) {
				t.Fatalf("group %q from %x: encodes to %x, %v", p.Group, read, b, err)
			}
		default:
			t.Fatalf("kind %d", p.Kind)
		}
	})
}
