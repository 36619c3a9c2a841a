package scheduler

import (
	"fmt"
	"math"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestWeightedShares: keys of weight 1..5, all backlogged, one consumer
// acking as it goes: each key's share of 15,000 deliveries is within 1% of
// w/15.
func TestWeightedShares(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	for _, tc := range []struct {
		name     string
		quantum  int32
		inFlight int
	}{
		{"quantum 1, credit 10", 1, 10},
		{"quantum 3, credit 64", 3, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t)
				e.createQueue("q", &fsmv1.QueueConfig{FairnessQuantum: tc.quantum})
				const total = 15_000
				for w := 1; w <= 5; w++ {
					e.enqueueN("q", total*w/15+200, &fsmv1.EnqueueMessage{FairnessKey: fmt.Sprintf("k%d", w), Weight: uint32(w)})
				}
				c := e.register("q", tc.inFlight)
				counts := map[string]int{}
				for range total {
					d := e.recv(c)
					counts[d.FairnessKey]++
					e.ack(d)
				}
				for w := 1; w <= 5; w++ {
					want := float64(total) * float64(w) / 15
					got := float64(counts[fmt.Sprintf("k%d", w)])
					if math.Abs(got-want)/want > 0.01 {
						t.Errorf("weight %d: %v deliveries, want %v ±1%%", w, got, want)
					}
				}
				t.Logf("counts %v", counts)
			})
		})
	}
}

// TestSmallKeyInterleaves: a key with 10 messages is not stuck behind a key
// with 1,000: they alternate from the first delivery.
func TestSmallKeyInterleaves(t *testing.T) {
	for _, credit := range []int{1, 20, 2000} {
		t.Run(fmt.Sprintf("credit %d", credit), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t)
				e.createQueue("q", nil)
				e.enqueueN("q", 1000, &fsmv1.EnqueueMessage{FairnessKey: "big"})
				e.enqueueN("q", 10, &fsmv1.EnqueueMessage{FairnessKey: "small"})
				c := e.register("q", credit)
				for i := range 20 {
					d := e.recv(c)
					want := "big"
					if i%2 == 1 {
						want = "small"
					}
					if d.FairnessKey != want {
						t.Fatalf("delivery %d from key %q, want %q", i, d.FairnessKey, want)
					}
					e.ack(d)
				}
			})
		})
	}
}

// TestReenteringKeyNoBurst: a key that empties and comes back starts a new
// turn at the end of the round; it does not keep an old deficit.
func TestReenteringKeyNoBurst(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		e.enqueueN("q", 1, &fsmv1.EnqueueMessage{FairnessKey: "heavy", Weight: 10})
		e.enqueueN("q", 50, &fsmv1.EnqueueMessage{FairnessKey: "a"})
		e.enqueueN("q", 50, &fsmv1.EnqueueMessage{FairnessKey: "b"})
		c := e.register("q", 1)
		d := e.recv(c) // heavy's only message; heavy empties with deficit left
		if d.FairnessKey != "heavy" {
			t.Fatalf("first from %q", d.FairnessKey)
		}
		e.enqueueN("q", 20, &fsmv1.EnqueueMessage{FairnessKey: "heavy", Weight: 10})
		e.ack(d)
		var order []string
		for range 4 {
			d := e.recv(c)
			order = append(order, d.FairnessKey)
			e.ack(d)
		}
		// a and b come before heavy's new turn.
		if order[0] != "a" || order[1] != "b" || order[2] != "heavy" || order[3] != "heavy" {
			t.Fatalf("order %v", order)
		}
	})
}

func TestPeekOrderMatchesDelivery(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		for i, k := range []string{"x", "y", "z"} {
			e.enqueueN("q", 10, &fsmv1.EnqueueMessage{FairnessKey: k, Weight: uint32(i + 1)})
		}
		peek, err := e.f.Reader().Peek("q", 30, false)
		if err != nil {
			t.Fatal(err)
		}
		c := e.register("q", 30)
		for i, d := range e.recvN(c, 30) {
			if d.ID != peek[i].ID {
				t.Fatalf("delivery %d is %d (%s), peek said %d (%s)", i, d.ID, d.FairnessKey, peek[i].ID, peek[i].FairnessKey)
			}
		}
	})
}
