// Package fsm is raftq's replicated state machine: the Apply/Snapshot/
// Restore hooks hashicorp/raft drives, the encoding of the commands
// (proto/raftq/fsm/v1, the log format), their log versions, and the typed
// results Apply returns. It decodes an entry, checks its version and hands
// it to the state store (fsm/state), which holds the queues, messages,
// leases and counters and the rules that change them.
//
// Everything here is deterministic. Time, ids and lease tokens come from the
// command and the Raft index, never from the clock or a random source, and no
// outcome depends on map iteration order. Replicas that applied the same log
// prefix therefore hold identical state, which Digest lets tests and
// operators check.
package fsm
