// Package meta is the meta group's state machine (issue 21): the members,
// the data groups (replicas, epoch, max_queued_bytes share), the queue →
// group placement and its version, identities, tokens and grants (package
// acl's rules, the queue log's records), the cluster settings and the
// cluster version. It is a deterministic raft.FSM over its own log format
// (proto/raftq/meta/v1): no clock, no randomness, nothing that depends on
// map order; every entry carries its meta log version. It imports only
// acl and the protos; DESIGN.md says what it holds, how an upgraded
// cluster seeds it and what is left for wiring.
package meta
