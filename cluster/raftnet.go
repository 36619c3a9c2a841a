package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftmux"
)

// dataGroup is the node's one data group on the Raft port
// (raftmux): a peer that advertises preambles (nodeMeta.Mux) is dialled
// with one naming it, and a connection without one (every connection of
// a build before the multiplexer) belongs to it too.
const dataGroup = "data"

// listenRaft listens on bind; advertise (nil = the bound address) must be
// a specific address others can dial.
func listenRaft(ctx context.Context, bind string, advertise net.Addr) (net.Listener, net.Addr, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", bind)
	if err != nil {
		return nil, nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if ta, ok := advertise.(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) || !ok && !isNamedAddr(advertise) {
		ln.Close()
		return nil, nil, fmt.Errorf("raft address %s is not advertisable: set the advertise address", advertise)
	}
	return ln, advertise, nil
}

// openRaftPort serves the Raft port on ln as a multiplexer (raftmux)
// and registers the data group on it. preambles (nil: never) tells
// whether the node at an address understands preambles; ids names the
// server at an address once Raft exists (with TLS, the node certificate
// a dial expects).
func openRaftPort(ln net.Listener, advertise net.Addr, tlsCfg *TLS, log *slog.Logger,
	preambles func(raft.ServerAddress) bool, ids *serverIDs) (*raftmux.Mux, *raftmux.Layer, error) {
	mux, err := raftmux.New(ln, advertise, raftmux.Config{TLS: tlsCfg, Log: log, Legacy: dataGroup, Preambles: preambles})
	if err != nil {
		return nil, nil, err
	}
	layer, err := mux.Register(dataGroup, ids.idOf)
	if err != nil {
		mux.Close()
		return nil, nil, err
	}
	return mux, layer, nil
}

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

// namedAddr is an advertised Raft address by host name (host:port), kept
// as the name in the Raft configuration; dials resolve it each time.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

func isNamedAddr(a net.Addr) bool { _, ok := a.(namedAddr); return ok }
