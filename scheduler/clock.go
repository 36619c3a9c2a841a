package scheduler

import (
	"sync"
	"time"
)

// Clock is the scheduler's source of time. The real clock is the default;
// tests use a FakeClock.
type Clock interface {
	Now() time.Time
	// NewTimer returns a started timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer the scheduler uses. Reset and Stop leave
// no stale value in C (Go 1.23 semantics).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock is the wall clock.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// FakeClock is a manual clock for tests: time moves only by Advance or Set,
// which fire the timers that come due.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

// NewFakeClock returns a fake clock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, timers: map[*fakeTimer]struct{}{}}
}

// Now reads the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires due timers.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now.Add(d))
	c.mu.Unlock()
}

// Set moves the clock to t (never backwards) and fires due timers.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.setLocked(t)
	}
	c.mu.Unlock()
}

func (c *FakeClock) setLocked(t time.Time) {
	c.now = t
	for ft := range c.timers {
		if !ft.at.After(t) {
			delete(c.timers, ft)
			ft.fire(t)
		}
	}
}

// NewTimer implements Clock.
func (c *FakeClock) NewTimer(d time.Duration) Timer {
	ft := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	ft.Reset(d)
	return ft
}

type fakeTimer struct {
	c  *FakeClock
	ch chan time.Time
	at time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) fire(now time.Time) {
	select {
	case t.ch <- now:
	default:
	}
}

func (t *fakeTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.timers[t]
	delete(t.c.timers, t)
	t.drain()
	return active
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.timers[t]
	t.drain()
	t.at = t.c.now.Add(d)
	if d <= 0 {
		delete(t.c.timers, t)
		t.fire(t.c.now)
		return active
	}
	t.c.timers[t] = struct{}{}
	return active
}
