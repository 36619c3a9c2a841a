package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
)

// State is what the queue collector reads: the FSM's read side.
type State interface {
	Read(fn func(v fsm.View))
}

// ConsumerCounter tells how many consumers a queue has; ok is false where
// this node keeps no consumer registry (it is not the leader), so the
// family is left out rather than reported as zero.
type ConsumerCounter func(queue string) (n int, ok bool)

// QueueCollector exports every queue of this node's replicated state.
// Each scrape takes the read lock once, copies the numbers, and builds the
// metrics after releasing it.
type QueueCollector struct {
	state     State
	consumers ConsumerCounter
	now       func() time.Time
	drain     *Drain

	messages, bytes, consumersDesc, oldest, events, drainSecs, depthChange *prometheus.Desc
	paused, pausedKeys                                                     *prometheus.Desc
}

// NewQueueCollector reads st at every scrape; consumers may be nil (no
// consumer family); now is the clock ready ages are measured against;
// drain, if not nil, adds the drain-time families.
func NewQueueCollector(st State, consumers ConsumerCounter, now func() time.Time, drain *Drain) *QueueCollector {
	q := []string{"queue"}
	return &QueueCollector{
		state: st, consumers: consumers, now: now, drain: drain,
		drainSecs: prometheus.NewDesc("raftq_queue_drain_seconds",
			"Estimated seconds until a queue is empty at its current rates: 0 when empty, +Inf while it grows or holds steady; no series until two samples exist.", q, nil),
		depthChange: prometheus.NewDesc("raftq_queue_depth_change_per_second",
			"Moving average of a queue's net depth change (ready + delayed + in flight), negative while it drains.", q, nil),
		messages: prometheus.NewDesc("raftq_queue_messages",
			"Messages held by a queue, by state (ready, delayed, in_flight, dead_lettered: this queue's messages now in its dead-letter queue).",
			[]string{"queue", "state"}, nil),
		bytes: prometheus.NewDesc("raftq_queue_bytes",
			"What the messages a queue holds cost: payload, headers, keys, ids and a per-message overhead (stats.bytes).", q, nil),
		consumersDesc: prometheus.NewDesc("raftq_queue_consumers",
			"Consumers (Lease streams) registered on a queue; exported by the leader only.", q, nil),
		oldest: prometheus.NewDesc("raftq_queue_oldest_ready_age_seconds",
			"Age of the oldest ready message of a queue (0 when none is ready).", q, nil),
		paused: prometheus.NewDesc("raftq_queue_paused",
			"1 while the whole queue is paused (PauseQueue without a fairness key): nothing of it is delivered; 0 otherwise.", q, nil),
		pausedKeys: prometheus.NewDesc("raftq_queue_paused_keys",
			"Fairness keys of a queue paused on their own (PauseQueue with a fairness key).", q, nil),
		events: prometheus.NewDesc("raftq_queue_events_total",
			"Message events of a queue as this replica applied them: enqueued, acked, nacked and expired since the queue was created (replicated counters); delivered (leases granted) and dead_lettered since this node loaded its state.",
			[]string{"queue", "event"}, nil),
	}
}

// Describe sends the descriptors of every family.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.bytes, c.consumersDesc, c.oldest, c.events, c.drainSecs, c.depthChange, c.paused, c.pausedKeys} {
		ch <- d
	}
}

// queueSample is one queue's numbers, copied under the read lock.
type queueSample struct {
	name                  string
	stats                 state.QueueStats
	granted, deadLettered int64
	oldestMs              int64
	hasReady              bool
	paused                bool
	pausedKeys            int
}

// read copies every queue's numbers under one read lock: the only part
// of a scrape that holds off writers.
func (c *QueueCollector) read() []queueSample {
	var samples []queueSample
	c.state.Read(func(v fsm.View) {
		names := v.QueueNames()
		samples = make([]queueSample, 0, len(names))
		for _, name := range names {
			qv, ok := v.Queue(name)
			if !ok {
				continue
			}
			s := queueSample{name: name, stats: qv.Stats()}
			s.granted, s.deadLettered = qv.AppliedEvents()
			s.oldestMs, s.hasReady = qv.OldestReadyMs()
			s.paused, s.pausedKeys = qv.Paused(), qv.PausedKeys()
			samples = append(samples, s)
		}
	})
	return samples
}

// Collect reads every queue once and sends its metrics.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	samples := c.read()
	nowMs := c.now().UnixMilli()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	for _, s := range samples {
		st := s.stats
		ch <- prometheus.MustNewConstMetric(c.messages, gauge, float64(st.Ready), s.name, "ready")
		ch <- prometheus.MustNewConstMetric(c.messages, gauge, float64(st.Delayed), s.name, "delayed")
		ch <- prometheus.MustNewConstMetric(c.messages, gauge, float64(st.InFlight), s.name, "in_flight")
		ch <- prometheus.MustNewConstMetric(c.messages, gauge, float64(st.DeadLettered), s.name, "dead_lettered")
		ch <- prometheus.MustNewConstMetric(c.bytes, gauge, float64(st.Bytes), s.name)
		age := 0.0
		if s.hasReady {
			age = max(float64(nowMs-s.oldestMs)/1000, 0)
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, gauge, age, s.name)
		paused := 0.0
		if s.paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(c.paused, gauge, paused, s.name)
		ch <- prometheus.MustNewConstMetric(c.pausedKeys, gauge, float64(s.pausedKeys), s.name)
		ch <- prometheus.MustNewConstMetric(c.events, counter, float64(st.EnqueuedTotal), s.name, "enqueued")
		ch <- prometheus.MustNewConstMetric(c.events, counter, float64(s.granted), s.name, "delivered")
		ch <- prometheus.MustNewConstMetric(c.events, counter, float64(st.AckedTotal), s.name, "acked")
		ch <- prometheus.MustNewConstMetric(c.events, counter, float64(st.NackedTotal), s.name, "nacked")
		ch <- prometheus.MustNewConstMetric(c.events, counter, float64(st.ExpiredTotal), s.name, "expired")
		ch <- prometheus.MustNewConstMetric(c.events, counter, float64(s.deadLettered), s.name, "dead_lettered")
		if c.drain != nil {
			c.collectDrain(ch, s.name)
		}
		if c.consumers != nil {
			if n, ok := c.consumers(s.name); ok {
				ch <- prometheus.MustNewConstMetric(c.consumersDesc, gauge, float64(n), s.name)
			}
		}
	}
}

// collectDrain sends queue's drain estimate, once it has one.
func (c *QueueCollector) collectDrain(ch chan<- prometheus.Metric, queue string) {
	e, ok := c.drain.Estimate(queue)
	if !ok || e.State == DrainUnknown {
		return
	}
	secs := math.Inf(1)
	switch e.State {
	case DrainEmpty:
		secs = 0
	case DrainDraining:
		secs = e.EmptiesIn.Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.drainSecs, prometheus.GaugeValue, secs, queue)
	ch <- prometheus.MustNewConstMetric(c.depthChange, prometheus.GaugeValue, e.DepthChangePerSec, queue)
}
