// Package state is the data behind raftq's replicated state machine:
// queues, messages, leases and their indexes and counters, in the values
// the server works with (numeric message ids and lease tokens, the log
// format's configs). The fsm package decides what a command does; state
// holds the result and hands out read-only views and copies. Nothing here
// speaks the public API: ids become strings and configs API messages only
// at the API edge (transport).
package state
