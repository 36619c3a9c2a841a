package scheduler

import "time"

// Clock is where the scheduler reads the time: lease deadlines, the
// instants it wakes at, token buckets, the grace period, and the now_ms of
// the commands it proposes. The composition root passes the one clock it
// also stamps every other command with, so a command's times and the
// leader's "now" never come from two clocks.
//
// Waiting is done with the runtime's timers for the difference between two
// readings of the Clock; tests fake both with testing/synctest.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

// RealClock is the wall clock (time.Now).
func RealClock() Clock { return ClockFunc(time.Now) }
