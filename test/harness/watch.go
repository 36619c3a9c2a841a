package harness

import (
	"context"
	"slices"
	"sync"
	"time"
)

// WatchChanges calls get every interval, from its own goroutine, and
// records each value that differs from the one before, in order: a
// watcher polling faster than any phase it must see lasts (a node's
// suffrage going nonvoter, then voter). stop ends the polling after one
// last call and waits for the goroutine; it may be called more than once.
// seen returns the values recorded so far.
func WatchChanges[T comparable](interval time.Duration, get func() T) (seen func() []T, stop func()) {
	var (
		mu  sync.Mutex
		log []T
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			v := get()
			mu.Lock()
			if n := len(log); n == 0 || log[n-1] != v {
				log = append(log, v)
			}
			mu.Unlock()
			if ctx.Err() != nil {
				return // after a last look
			}
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	seen = func() []T {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(log)
	}
	return seen, func() { cancel(); <-done }
}
