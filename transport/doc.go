// Package transport is raftq's network edge: the gRPC server (Broker,
// Cluster, health, reflection), forwarding of unary calls from followers to
// the leader, the NOT_LEADER redirect for streams, input validation and the
// mapping of errors to status codes, and the HTTP side (metrics, health).
// It holds no state of its own: everything lives in the FSM or the
// scheduler.
package transport
