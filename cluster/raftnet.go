package cluster

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// dataGroup is the node's one data group on the Raft port
// (raftmux): a peer that advertises preambles (nodeMeta.Mux) is dialled
// with one naming it, and a connection without one (every connection of
// a build before the multiplexer) belongs to it too.
const dataGroup = "data"

// serverIDs names the servers of a group's latest Raft configuration by
// address, once its Raft exists (raft's StreamLayer.Dial is given only
// the address).
type serverIDs struct{ raft atomic.Pointer[raft.Raft] }

// idOf names the one server at addr in the latest Raft configuration.
func (s *serverIDs) idOf(addr raft.ServerAddress) (string, bool) {
	r := s.raft.Load()
	if r == nil {
		return "", false
	}
	servers, err := latestServers(r)
	if err != nil {
		return "", false
	}
	id, n := "", 0
	for _, sv := range servers {
		if sv.Address == addr {
			id, n = string(sv.ID), n+1
		}
	}
	return id, n == 1
}
