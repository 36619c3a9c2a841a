package dashboard

import (
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// Sample is one queue's numbers at one moment.
type Sample struct {
	At       time.Time
	Depth    int64 // ready + delayed + in flight
	Enqueued int64 // enqueued_total
	Acked    int64 // acked_total
}

// History keeps the last few samples of every queue in a ring per queue,
// in memory on this node only: a restart starts it empty, and a queue that
// is gone at a sample is forgotten, so its size is bounded by the queues
// that exist times the ring length.
type History struct {
	mu    sync.Mutex
	size  int
	rings map[string]*ring
}

type ring struct {
	buf  []Sample
	next int
	full bool
}

// NewHistory keeps size samples per queue.
func NewHistory(size int) *History {
	return &History{size: max(size, 2), rings: map[string]*ring{}}
}

// Record adds a sample of every queue in qs taken at now and drops the
// queues that are not in qs.
func (h *History) Record(now time.Time, qs []*raftqv1.QueueInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(qs))
	for _, q := range qs {
		seen[q.GetName()] = true
		r := h.rings[q.GetName()]
		if r == nil {
			r = &ring{buf: make([]Sample, h.size)}
			h.rings[q.GetName()] = r
		}
		st := q.GetStats()
		r.buf[r.next] = Sample{
			At:       now,
			Depth:    st.GetReady() + st.GetDelayed() + st.GetInFlight(),
			Enqueued: st.GetEnqueuedTotal(),
			Acked:    st.GetAckedTotal(),
		}
		r.next = (r.next + 1) % len(r.buf)
		if r.next == 0 {
			r.full = true
		}
	}
	for name := range h.rings {
		if !seen[name] {
			delete(h.rings, name)
		}
	}
}

// Samples returns queue's samples, oldest first.
func (h *History) Samples(queue string) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rings[queue]
	if r == nil {
		return nil
	}
	if !r.full {
		return append([]Sample(nil), r.buf[:r.next]...)
	}
	return append(append([]Sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// Rates are per-second averages over the samples a history holds.
type Rates struct {
	Enqueued, Acked float64
	Known           bool // false with fewer than two samples
}

// RatesOf averages the counters' growth between the oldest and newest
// sample. A counter that went down (the queue was deleted and made again
// between two samples) counts from zero.
func RatesOf(s []Sample) Rates {
	if len(s) < 2 {
		return Rates{}
	}
	first, last := s[0], s[len(s)-1]
	secs := last.At.Sub(first.At).Seconds()
	if secs <= 0 {
		return Rates{}
	}
	delta := func(a, b int64) float64 {
		if b < a {
			return float64(b)
		}
		return float64(b - a)
	}
	return Rates{Enqueued: delta(first.Enqueued, last.Enqueued) / secs, Acked: delta(first.Acked, last.Acked) / secs, Known: true}
}
