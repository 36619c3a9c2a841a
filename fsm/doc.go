// Package fsm is raftq's replicated state machine: queues, messages, leases
// and counters, the encoding of the commands that change them, and the
// Apply/Snapshot/Restore hooks hashicorp/raft drives.
//
// Everything here is deterministic. Time, ids and lease tokens come from the
// command and the Raft index, never from the clock or a random source, and no
// outcome depends on map iteration order. Replicas that applied the same log
// prefix therefore hold identical state, which Digest lets tests and
// operators check.
package fsm
