package workload

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Ledger does the exactly-once accounting of a run: which messages the
// broker acknowledged to producers and how often each was delivered to a
// consumer. Deliveries may be recorded before the acknowledgement that
// covers them (a consumer can be faster than the producer's response).
type Ledger struct {
	mu        sync.Mutex
	acked     map[Key]struct{}
	delivered map[Key]uint32
	// pending counts acknowledged messages not delivered yet; zero is
	// closed whenever pending is 0.
	pending int64
	// pendingBy is pending by the phase index in the message key, so that
	// a phase can wait for its own messages only.
	pendingBy  map[int]int64
	deliveries int64
	zero       chan struct{}
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	z := make(chan struct{})
	close(z)
	return &Ledger{acked: map[Key]struct{}{}, delivered: map[Key]uint32{}, pendingBy: map[int]int64{}, zero: z}
}

// Acked records messages the broker acknowledged.
func (l *Ledger) Acked(keys ...Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if _, dup := l.acked[k]; dup {
			continue
		}
		l.acked[k] = struct{}{}
		if l.delivered[k] == 0 {
			if l.pending == 0 {
				l.zero = make(chan struct{})
			}
			l.pending++
			l.pendingBy[k.Phase()]++
		}
	}
}

// Delivered records one delivery of k to a consumer.
func (l *Ledger) Delivered(k Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries++
	l.delivered[k]++
	if l.delivered[k] == 1 {
		if _, ok := l.acked[k]; ok {
			l.pendingBy[k.Phase()]--
			l.pending--
			if l.pending == 0 {
				close(l.zero)
			}
		}
	}
}

// Pending is the number of acknowledged messages not delivered yet.
func (l *Ledger) Pending() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// PendingIn is the number of acknowledged messages not delivered yet
// that the given phase indexes sent (MakeKey's phase).
func (l *Ledger) PendingIn(phases ...int) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pendingIn(phases)
}

func (l *Ledger) pendingIn(phases []int) int64 {
	if len(phases) == 0 {
		return l.pending
	}
	var n int64
	for _, p := range phases {
		n += l.pendingBy[p]
	}
	return n
}

// Deliveries is the number of deliveries recorded, duplicates included.
func (l *Ledger) Deliveries() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deliveries
}

// WaitDelivered returns nil once every acknowledged message has been
// delivered — of the given phase indexes only, if any are given — or an
// error when ctx ends or when no delivery at all arrives for idle. Call it
// once no more acknowledgements are coming, or it may return while later
// ones are still to be delivered. Waiting for its own phases keeps a phase
// from failing for messages an earlier phase left behind.
func (l *Ledger) WaitDelivered(ctx context.Context, idle time.Duration, phases ...int) error {
	tick := 100 * time.Millisecond
	if len(phases) > 0 {
		tick = 10 * time.Millisecond // no channel says when these reach zero
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	last, since := l.Deliveries(), time.Now()
	for {
		l.mu.Lock()
		zero, pending := l.zero, l.pendingIn(phases)
		l.mu.Unlock()
		if pending == 0 {
			return nil
		}
		if len(phases) > 0 {
			zero = nil
		}
		select {
		case <-zero:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%d acknowledged messages not delivered: %w", l.PendingIn(phases...), ctx.Err())
		case now := <-t.C:
			if d := l.Deliveries(); d != last {
				last, since = d, now
			} else if now.Sub(since) >= idle {
				return fmt.Errorf("%d acknowledged messages not delivered, and no delivery for %v", l.PendingIn(phases...), idle)
			}
		}
	}
}

// Check is the exactly-once verdict of a run.
type Check struct {
	// Acked messages were acknowledged to a producer; Delivered is how
	// many distinct messages reached a consumer.
	Acked     int64 `json:"acked"`
	Delivered int64 `json:"delivered"`
	// Missing were acknowledged but never delivered (lost).
	Missing int64 `json:"missing"`
	// Duplicates counts deliveries beyond the first, over DuplicateKeys
	// distinct messages.
	Duplicates    int64 `json:"duplicates"`
	DuplicateKeys int64 `json:"duplicate_keys"`
	// Unacknowledged were delivered though their enqueue call failed or
	// timed out: allowed (the outcome was unknown), not an error.
	Unacknowledged int64 `json:"unacknowledged_delivered"`
	// LeftInQueue is what the broker still held after the consumers
	// stopped (-1 when it could not be read).
	LeftInQueue int64 `json:"left_in_queue"`
	// Examples name a few missing or duplicated messages.
	Examples []string `json:"examples,omitempty"`
}

// OK reports whether every acknowledged message was delivered exactly once
// and nothing was left behind.
func (c Check) OK() bool {
	return c.Missing == 0 && c.Duplicates == 0 && c.LeftInQueue == 0
}

func (c Check) String() string {
	verdict := "exactly once"
	if !c.OK() {
		verdict = "NOT exactly once"
	}
	return fmt.Sprintf("%s: acked %d, delivered %d distinct, missing %d, duplicates %d (%d messages), delivered-without-ack %d, left in queue %d",
		verdict, c.Acked, c.Delivered, c.Missing, c.Duplicates, c.DuplicateKeys, c.Unacknowledged, c.LeftInQueue)
}

// Check compares acknowledgements with deliveries. LeftInQueue is left 0
// for the caller to fill.
func (l *Ledger) Check() Check {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Check{Acked: int64(len(l.acked)), Delivered: int64(len(l.delivered))}
	var missing, dups []Key
	for k := range l.acked {
		if l.delivered[k] == 0 {
			c.Missing++
			missing = append(missing, k)
		}
	}
	for k, n := range l.delivered {
		if n > 1 {
			c.DuplicateKeys++
			c.Duplicates += int64(n - 1)
			dups = append(dups, k)
		}
		if _, ok := l.acked[k]; !ok {
			c.Unacknowledged++
		}
	}
	slices.Sort(missing)
	slices.Sort(dups)
	for _, k := range missing[:min(len(missing), 5)] {
		c.Examples = append(c.Examples, fmt.Sprintf("missing phase=%d producer=%d seq=%d", k.Phase(), k.Producer(), k.Seq()))
	}
	for _, k := range dups[:min(len(dups), 5)] {
		c.Examples = append(c.Examples, fmt.Sprintf("duplicate x%d phase=%d producer=%d seq=%d", l.delivered[k], k.Phase(), k.Producer(), k.Seq()))
	}
	return c
}
