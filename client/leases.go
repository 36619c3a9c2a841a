package client

import (
	"context"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// defaultLease is assumed when neither the delivery nor the options say how
// long a lease lasts (the broker's default visibility timeout).
const defaultLease = 30 * time.Second

// minExtendInterval keeps a lease that looks already expired (clock skew, a
// delivery that waited in the client) from being extended in a tight loop.
const minExtendInterval = 50 * time.Millisecond

// held is a delivery the consumer holds a lease on, from receipt until it
// is settled or the lease is lost.
type held struct {
	d   *raftqv1.Delivery
	ref *raftqv1.LeaseRef

	// Guarded by leases.mu.
	running bool
	cancel  context.CancelCauseFunc // the handler's context, while running
	expiry  time.Time               // local estimate of the lease's end
	next    time.Time               // when to extend
	slack   time.Duration           // extend this early to batch with others
}

// leases tracks every lease the consumer holds, keyed by lease token, and
// when each must be extended. Deliveries waiting for a handler are tracked
// too: their leases run while they wait.
type leases struct {
	lease time.Duration // ConsumerOptions.VisibilityTimeout; 0 = unknown
	wake  chan struct{} // capacity 1: a lease was added, the keeper re-plans

	mu     sync.Mutex
	byTok  map[string]*held
	closed bool
}

func newLeases(lease time.Duration) *leases {
	return &leases{
		lease: lease,
		wake:  make(chan struct{}, 1),
		byTok: make(map[string]*held),
	}
}

// schedule sets when h is next extended: halfway through what remains of
// its lease. That is what the broker says remains (remainingMs, measured
// from now, when the answer was received, on our monotonic clock: no
// clock of ours has to agree with the leader's); from a broker too old to
// say, the shorter of its deadline read with our clock (wrong by our
// clocks' skew) and the configured lease length.
func (l *leases) schedule(h *held, deadlineMs, remainingMs int64, now time.Time) {
	remaining := l.lease
	switch {
	case remainingMs > 0:
		remaining = time.Duration(remainingMs) * time.Millisecond
	case deadlineMs > 0:
		if r := time.UnixMilli(deadlineMs).Sub(now); remaining == 0 || r < remaining {
			remaining = r
		}
	}
	if remaining == 0 {
		remaining = defaultLease
	}
	h.expiry = now.Add(remaining)
	interval := max(remaining/2, minExtendInterval)
	h.next = now.Add(interval)
	h.slack = interval / 4
}

// add starts tracking d; false once the consumer is shutting down.
func (l *leases) add(d *raftqv1.Delivery, now time.Time) (*held, bool) {
	h := &held{d: d, ref: &raftqv1.LeaseRef{MessageId: d.GetId(), LeaseToken: d.GetLeaseToken()}}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, false
	}
	l.schedule(h, d.GetLeaseDeadlineMs(), d.GetLeaseRemainingMs(), now)
	l.byTok[h.ref.LeaseToken] = h
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return h, true
}

// start marks h as being handled; false if it is no longer held (lost, or
// handed back at shutdown).
func (l *leases) start(h *held, cancel context.CancelCauseFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byTok[h.ref.LeaseToken] != h {
		return false
	}
	h.running = true
	h.cancel = cancel
	return true
}

// finish stops tracking h; false if its lease was lost meanwhile, so there
// is nothing to settle.
func (l *leases) finish(h *held) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byTok[h.ref.LeaseToken] != h {
		return false
	}
	delete(l.byTok, h.ref.LeaseToken)
	return true
}

// lost drops a lease the broker no longer honours and cancels its handler.
func (l *leases) lost(token string) {
	l.mu.Lock()
	h, ok := l.byTok[token]
	if ok {
		delete(l.byTok, token)
	}
	l.mu.Unlock()
	if ok && h.cancel != nil {
		h.cancel(ErrLeaseLost)
	}
}

// extended records the broker's new deadline and remaining time for a
// lease (now: when its answer was received).
func (l *leases) extended(token string, deadlineMs, remainingMs int64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.byTok[token]; ok {
		l.schedule(h, deadlineMs, remainingMs, now)
	}
}

// retryLater reschedules leases whose extension call failed as a whole.
func (l *leases) retryLater(tokens []string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range tokens {
		if h, ok := l.byTok[t]; ok {
			h.next = now.Add(max(h.expiry.Sub(now)/2, 4*minExtendInterval))
			h.slack = 0
		}
	}
}

// due returns the leases to extend now, and when to look again (zero: no
// lease is held).
func (l *leases) due(now time.Time) (refs []*raftqv1.LeaseRef, soonest time.Duration, next time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	soonest = -1
	for _, h := range l.byTok {
		if !h.next.Add(-h.slack).After(now) {
			refs = append(refs, h.ref)
			if r := h.expiry.Sub(now); soonest < 0 || r < soonest {
				soonest = r
			}
			continue
		}
		if next.IsZero() || h.next.Before(next) {
			next = h.next
		}
	}
	return refs, soonest, next
}

// closeQueued stops accepting deliveries and returns (and forgets) those
// not yet handed to a handler, so the caller can give them back.
func (l *leases) closeQueued() []*held {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var queued []*held
	for tok, h := range l.byTok {
		if !h.running {
			queued = append(queued, h)
			delete(l.byTok, tok)
		}
	}
	return queued
}
