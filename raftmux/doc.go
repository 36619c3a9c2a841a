// Package raftmux serves every Raft group of a node on one TCP port.
//
// A connection opens with a preamble naming its group (PreambleByte, one
// length byte, the group id); Mux hands it to that group's Layer, a
// raft.StreamLayer. A connection without a preamble (its first byte is a
// hashicorp/raft RPC type) goes to the legacy group, so nodes of builds
// before the multiplexer keep talking to this one; LeaveByte opens an
// authenticated leave instead. With TLS every connection is mutual TLS
// with node certificates, checked before any byte is read.
//
// The package imports nothing of raftq: see DESIGN.md.
package raftmux
