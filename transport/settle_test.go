package transport

import (
	"context"
	"testing"
	"testing/synctest"
)

// TestSettleGateWaitsForEarlierCallsOnly: wait returns once the calls
// registered before it ended, whatever later calls do, and at once when
// none is open.
func TestSettleGateWaitsForEarlierCallsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newSettleGate()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g.wait(ctx) // nothing open: returns at once

		first, second := g.arrive(), g.arrive()
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			g.wait(ctx)
		}()
		synctest.Wait() // the waiter is blocked, its calls counted
		later := g.arrive()
		defer later()
		first()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("wait returned with an earlier call still open")
		default:
		}
		second()
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("wait did not return once the earlier calls ended (a later one is still open)")
		}
	})
}
