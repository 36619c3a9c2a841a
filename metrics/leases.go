package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LeaseKey names one lease: a message of a queue under one token.
type LeaseKey struct {
	Queue string
	ID    uint64
	Token uint64
}

// Leases holds the leader's delivery histograms: enqueue to delivery,
// observed when a delivery is pushed on its stream, and grant to settle
// (the lease's duration), observed when its ack or nack is applied. It
// remembers when each pushed lease started until it settles; a lease that
// expires or is released instead is forgotten once its deadline is long
// past (pruned as the table grows), so the table stays bounded by the
// leases alive.
type Leases struct {
	enqueueToDelivery *prometheus.HistogramVec
	duration          *prometheus.HistogramVec

	mu        sync.Mutex
	started   map[LeaseKey]leaseStart
	pruneAt   int // prune when the table reaches this size
	pruneGone time.Duration
}

type leaseStart struct {
	at       time.Time
	deadline time.Time
}

// minPrune is the table size below which no pruning happens.
const minPrune = 4096

// NewLeases builds the histograms. A lease whose deadline passed more
// than grace ago is forgotten when the table is pruned.
func NewLeases(grace time.Duration) *Leases {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 22) // 1 ms .. ~35 min
	return &Leases{
		enqueueToDelivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftq_enqueue_to_delivery_seconds",
			Help:    "Time from a message's enqueue to its delivery on a Lease stream (leader only; every delivery attempt).",
			Buckets: buckets,
		}, []string{"queue"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftq_lease_duration_seconds",
			Help:    "Time from a delivery being pushed to its ack or nack being applied (leader only).",
			Buckets: buckets,
		}, []string{"queue"}),
		started:   map[LeaseKey]leaseStart{},
		pruneAt:   minPrune,
		pruneGone: grace,
	}
}

// Delivery is one pushed delivery, as Delivered needs it.
type Delivery struct {
	Key        LeaseKey
	EnqueuedMs int64
	DeadlineMs int64
}

// Delivered records deliveries pushed on a stream at now.
func (l *Leases) Delivered(ds []Delivery, now time.Time) {
	if len(ds) == 0 {
		return
	}
	obs := l.enqueueToDelivery.WithLabelValues(ds[0].Key.Queue)
	nowMs := now.UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range ds {
		if d.Key.Queue != ds[0].Key.Queue {
			obs = l.enqueueToDelivery.WithLabelValues(d.Key.Queue)
		}
		obs.Observe(max(float64(nowMs-d.EnqueuedMs)/1000, 0))
		l.started[d.Key] = leaseStart{at: now, deadline: time.UnixMilli(d.DeadlineMs)}
	}
	if len(l.started) >= l.pruneAt {
		l.prune(now)
	}
}

// prune forgets leases whose deadline passed more than the grace ago
// (l.mu held), and sets the next size to prune at to twice what is left,
// so pruning costs O(1) amortized per delivery.
func (l *Leases) prune(now time.Time) {
	for k, s := range l.started {
		if now.Sub(s.deadline) > l.pruneGone {
			delete(l.started, k)
		}
	}
	l.pruneAt = max(2*len(l.started), minPrune)
}

// Settled records that the named leases were acked or nacked at now.
func (l *Leases) Settled(keys []LeaseKey, now time.Time) {
	var (
		obs   prometheus.Observer
		queue string
	)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		s, ok := l.started[k]
		if !ok {
			continue
		}
		delete(l.started, k)
		// An ack names one queue: resolve its histogram once, not per
		// lease (this runs for every Ack call on the leader).
		if obs == nil || k.Queue != queue {
			obs, queue = l.duration.WithLabelValues(k.Queue), k.Queue
		}
		obs.Observe(max(now.Sub(s.at).Seconds(), 0))
	}
}

// Forget drops a queue's histograms (it was deleted).
func (l *Leases) Forget(queue string) {
	l.enqueueToDelivery.DeleteLabelValues(queue)
	l.duration.DeleteLabelValues(queue)
}

// Tracked is the number of leases remembered (for tests).
func (l *Leases) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.started)
}

// Describe sends both histograms' descriptors (Leases is a
// prometheus.Collector).
func (l *Leases) Describe(ch chan<- *prometheus.Desc) {
	l.enqueueToDelivery.Describe(ch)
	l.duration.Describe(ch)
}

// Collect sends both histograms.
func (l *Leases) Collect(ch chan<- prometheus.Metric) {
	l.enqueueToDelivery.Collect(ch)
	l.duration.Collect(ch)
}
