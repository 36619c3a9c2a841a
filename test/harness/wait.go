package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// WaitFor calls cond every interval until it returns nil, or until ctx
// ends or timeout passes (timeout 0: ctx alone bounds the wait); then it
// returns an error wrapping the context's and cond's last one. cond gets
// the bounded context. Waiting for a condition never sleeps a guessed
// time: it asks again until a deadline.
func WaitFor(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	// complete is the error of the last attempt that ran to its end: one
	// the deadline cut short fails for that reason alone (its calls end
	// with DeadlineExceeded), which does not say why the wait failed.
	var complete error
	for {
		last := cond(ctx)
		if last == nil {
			return nil
		}
		if ctx.Err() == nil {
			complete = last
		} else if complete != nil {
			last = fmt.Errorf("%w; the last complete attempt: %w", last, complete)
		}
		t.Reset(interval)
		select {
		case <-ctx.Done():
			if timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not within %v: %w (last: %w)", timeout, ctx.Err(), last)
			}
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// Eventually is WaitFor for a test: it polls cond every 20 ms and fails t
// if cond has not returned nil within timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	err := WaitFor(context.Background(), timeout, 20*time.Millisecond, func(context.Context) error { return cond() })
	if err != nil {
		t.Fatalf("condition not met: %v", err)
	}
}

// Holds turns a yes/no condition into one Eventually or WaitFor can
// report: cond's error, while ok is false, says what is still awaited.
func Holds(what string, ok func() bool) func() error {
	return func() error {
		if ok() {
			return nil
		}
		return errors.New("still waiting for " + what)
	}
}

// Sleep waits d, or until ctx ends (then it returns ctx's error). It
// paces work over time (a fault's hold, a consumer's think time, a
// measuring window); it never stands in for waiting on a condition,
// which is WaitFor's job.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
