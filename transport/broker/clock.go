package broker

import "github.com/raftq/raftq/scheduler"

// Clock is the node's one source of time: every command's now_ms is
// stamped from it (Broker.propose), and the scheduler computes lease
// deadlines, delays and token buckets from the same clock, so a command's
// times and the leader's view of "now" never come from two readings of two
// clocks. Tests replace it (Config.Clock).
type Clock = scheduler.Clock

// wallClock is the default Clock.
func wallClock() Clock { return scheduler.RealClock() }
