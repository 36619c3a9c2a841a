package cluster

// dataGroup is the node's one data group on the Raft port
// (raftmux): a peer that advertises preambles (membership.Meta.Mux) is dialled
// with one naming it, and a connection without one (every connection of
// a build before the multiplexer) belongs to it too.
const dataGroup = "data"
