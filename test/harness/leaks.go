package harness

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// LeakWait bounds how long CheckNoLeaks waits for goroutines to end: a
// stopped node's connections and timers wind down asynchronously.
const LeakWait = 15 * time.Second

// CheckNoLeaks waits (bounded by LeakWait) until no more goroutines run
// than base (runtime.NumGoroutine before the test started what it
// stops), and fails t with every goroutine's stack if some are left.
func CheckNoLeaks(t testing.TB, base int) {
	t.Helper()
	CheckNoLeaksWithin(t, base, LeakWait)
}

// CheckNoLeaksWithin is CheckNoLeaks with its own bound on the wait, for
// tests whose nodes are known to wind down sooner than LeakWait (the
// in-process cluster tests allow 10 s).
func CheckNoLeaksWithin(t testing.TB, base int, wait time.Duration) {
	t.Helper()
	err := WaitFor(context.Background(), wait, 20*time.Millisecond, func(context.Context) error {
		if n := runtime.NumGoroutine(); n > base {
			return fmt.Errorf("%d goroutines, %d before", n, base)
		}
		return nil
	})
	if err != nil {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("goroutines left behind: %d now, %d before\n%s", runtime.NumGoroutine(), base, b.String())
	}
}
