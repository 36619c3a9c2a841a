package broker

import (
	"time"

	"github.com/raftq/raftq/scheduler"
)

// Clock is the node's one source of time: every command's now_ms is
// stamped from it (Broker.propose), and the scheduler computes lease
// deadlines, delays and token buckets from the same clock, so a command's
// times and the leader's view of "now" never come from two readings of two
// clocks. Tests replace it (Config.Clock).
type Clock = scheduler.Clock

// Monotonic is a Clock that can also say how much time has passed on a
// clock that is never set (the kernel's monotonic clock): the wall clock
// may be stepped, backwards or forwards, by an operator or a time daemon,
// and the time a command carries must not step with it.
type Monotonic interface {
	Clock
	// Elapsed is the time since some fixed instant, read from a clock
	// that is never set; only differences between readings mean anything.
	Elapsed() time.Duration
}

// wallClock is the default Clock: the wall clock, with the monotonic
// reading every time.Now carries.
func wallClock() Clock { return realMonotonic{start: time.Now()} }

type realMonotonic struct{ start time.Time }

func (realMonotonic) Now() time.Time { return time.Now() }

// Elapsed uses the monotonic readings of both instants (time.Since).
func (r realMonotonic) Elapsed() time.Duration { return time.Since(r.start) }

// steadyClock reads the wall clock once, when the node starts, and from
// then on adds the time elapsed on the monotonic clock: a wall clock
// stepped while the node runs moves nothing, so no command is stamped
// earlier than the one before it (which the state would read as time
// standing still for as long as the step), nor later by a step forward
// (which the state would read as that much time passing: delays, TTLs
// and leases cut short). A restart reads the wall clock again; a new
// leader's first entry only notes its reading (fsm/state/clock.go), so
// the difference between the two readings is never counted as elapsed.
// Clocks that cannot measure elapsed time (a test's fake) are used as
// they are.
type steadyClock struct {
	m      Monotonic
	wall0  time.Time
	since0 time.Duration
}

// steady returns c as a steady clock, or c itself if it has no monotonic
// reading.
func steady(c Clock) Clock {
	m, ok := c.(Monotonic)
	if !ok {
		return c
	}
	return &steadyClock{m: m, wall0: m.Now().Round(0), since0: m.Elapsed()}
}

func (s *steadyClock) Now() time.Time { return s.wall0.Add(s.m.Elapsed() - s.since0) }
