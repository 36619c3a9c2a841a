package raftmux

import (
	"errors"
	"fmt"
	"io"
)

// hashicorp/raft v1.7's RPC type bytes (net_transport.go: rpcAppendEntries
// = 0 … rpcRequestPreVote = 4) open every connection of a build before the
// multiplexer. The bytes below lie outside them, and outside each other.
const (
	// LeaveByte opens an authenticated leave (the dialling node, known by
	// its node certificate, announces that it is leaving) instead of a
	// Raft connection. Builds before the multiplexer send it too.
	LeaveByte = 0xF0
	// PreambleByte opens a preamble: one length byte, then the group id.
	PreambleByte = 0xF1
	// MaxGroupIDLen bounds a group id.
	MaxGroupIDLen = 64
)

// Kind is what a connection's first bytes open.
type Kind int

const (
	// KindLegacy: no preamble; First is the first byte of a Raft RPC and
	// belongs to the legacy group's stream.
	KindLegacy Kind = iota
	// KindGroup: a preamble naming Group.
	KindGroup
	// KindLeave: an authenticated leave.
	KindLeave
)

// Preamble is what Decode read.
type Preamble struct {
	Kind  Kind
	First byte   // KindLegacy: the byte to put back
	Group string // KindGroup
}

// ErrBadPreamble: a preamble that is cut short or names no valid group id.
var ErrBadPreamble = errors.New("raftmux: bad preamble")

// ValidGroupID reports why id cannot name a group, or nil: 1 to
// MaxGroupIDLen bytes of [A-Za-z0-9._-], not "." or ".." (a group's id may
// name its directory).
func ValidGroupID(id string) error {
	if len(id) == 0 || len(id) > MaxGroupIDLen {
		return fmt.Errorf("%w: group id length %d not in 1..%d", ErrBadPreamble, len(id), MaxGroupIDLen)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%w: group id %q", ErrBadPreamble, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: group id has byte 0x%02x at %d", ErrBadPreamble, c, i)
		}
	}
	return nil
}

// Encode returns the preamble naming group.
func Encode(group string) ([]byte, error) {
	if err := ValidGroupID(group); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 2+len(group))
	b = append(b, PreambleByte, byte(len(group)))
	return append(b, group...), nil
}

// Decode reads a connection's opening from r: exactly the bytes of a
// preamble or a leave byte, or the one first byte of a Raft RPC. It never
// reads past them, so r may be the connection itself.
func Decode(r io.Reader) (Preamble, error) {
	var b [1 + MaxGroupIDLen]byte
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return Preamble{}, err
	}
	switch b[0] {
	case LeaveByte:
		return Preamble{Kind: KindLeave}, nil
	case PreambleByte:
	default:
		return Preamble{Kind: KindLegacy, First: b[0]}, nil
	}
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return Preamble{}, fmt.Errorf("%w: no length: %w", ErrBadPreamble, err)
	}
	n := int(b[0])
	if n == 0 || n > MaxGroupIDLen {
		return Preamble{}, fmt.Errorf("%w: group id length %d not in 1..%d", ErrBadPreamble, n, MaxGroupIDLen)
	}
	if _, err := io.ReadFull(r, b[:n]); err != nil {
		return Preamble{}, fmt.Errorf("%w: group id cut short: %w", ErrBadPreamble, err)
	}
	id := string(b[:n])
	if err := ValidGroupID(id); err != nil {
		return Preamble{}, err
	}
	return Preamble{Kind: KindGroup, Group: id}, nil
}
