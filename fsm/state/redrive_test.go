package state

import (
	"math/rand/v2"
	"testing"
)

// dueAt is the first instant at which allowed lets want more move: the
// leader, asking then, never asks in vain (no spinning) nor late.
func TestRedriveDueAtMatchesAllowed(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		j := &redriveJob{
			rateMilli: 1 + r.Int64N(MaxRedriveRateMilli),
			startedMs: r.Int64N(1 << 40),
			total:     1 + r.Int64N(1<<30),
		}
		if i%3 == 0 {
			j.rateMilli = 1 + r.Int64N(5000) // slow ones: fractions of a message per second
		}
		j.moved = r.Int64N(j.total)
		want := 1 + r.Int64N(min(j.total-j.moved, RedriveStepMoves))
		at := j.dueAt(want)
		if got := j.allowed(at); got < j.moved+want {
			t.Fatalf("%+v want %d: allowed(dueAt=%d) = %d < %d", j, want, at, got, j.moved+want)
		}
		if at > j.startedMs {
			if got := j.allowed(at - 1); got >= j.moved+want {
				t.Fatalf("%+v want %d: allowed(dueAt-1=%d) = %d, already enough", j, want, at-1, got)
			}
		}
		// Never more than burst + rate·elapsed.
		el := r.Int64N(1 << 34)
		if got, limit := j.allowed(j.startedMs+el), float64(j.burst())+float64(el)*float64(j.rateMilli)/1e6; float64(got) > limit+1e-6*limit+1 {
			t.Fatalf("%+v: allowed after %d ms = %d, past %v", j, el, got, limit)
		}
	}
}
