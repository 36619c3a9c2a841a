// Package broker is a node's data group: it builds the replicated queue
// state machine, its cluster node, the leader's scheduler, the write
// coalescers and the proposer in one order (package host, the composition
// root, builds the node around it), stamps the time of
// every command from one clock, runs the leader-only work for as long as
// the node leads, and exposes the broker's operations (enqueue, lease,
// ack, queue admin, reads) and one routing decision per call.
//
// It never speaks gRPC: package transport authenticates, validates, routes
// and maps errors on top of it. See DESIGN.md beside this file.
package broker
