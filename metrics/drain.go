package metrics

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
)

// DrainState says where a queue's depth is heading.
type DrainState string

// Drain states.
const (
	// DrainUnknown: fewer than two samples yet.
	DrainUnknown DrainState = "unknown"
	// DrainEmpty: nothing ready, delayed or in flight.
	DrainEmpty DrainState = "empty"
	// DrainDraining: the depth is falling; EmptiesIn says when it reaches 0.
	DrainDraining DrainState = "draining"
	// DrainGrowing: the depth is rising.
	DrainGrowing DrainState = "growing"
	// DrainSteady: the depth holds (within DrainEpsilon).
	DrainSteady DrainState = "steady"
)

// DrainEpsilon is the smallest depth change, in messages per second,
// taken as a trend: slower than that the queue is steady.
const DrainEpsilon = 0.01

// DrainEstimate is one queue's trend.
type DrainEstimate struct {
	State DrainState
	// Depth is ready + delayed + in flight at the last sample.
	Depth int64
	// DepthChangePerSec is the EWMA of the net depth change (negative
	// while draining).
	DepthChangePerSec float64
	// DeliveriesPerSec is the EWMA of the rate of grants.
	DeliveriesPerSec float64
	// EmptiesIn is the time to empty at the current rate (Draining only).
	EmptiesIn time.Duration
}

// Drain estimates, per queue, when it will be empty at the current rates
// (qrusty's idea): it samples each queue's depth and grant count from the
// node's state at a fixed interval and keeps exponentially weighted moving
// averages of their rates, so a burst moves the estimate but does not
// make it. Every node runs one over its own state.
type Drain struct {
	state State
	tau   time.Duration // the averages' time constant

	mu     sync.Mutex
	last   time.Time
	queues map[string]*drainQueue
}

type drainQueue struct {
	depth, granted int64
	depthRate      float64
	deliveryRate   float64
	samples        int
}

// NewDrain estimates over st with averages of time constant tau.
func NewDrain(st State, tau time.Duration) *Drain {
	return &Drain{state: st, tau: tau, queues: map[string]*drainQueue{}}
}

// Run samples every interval, reading the time from now, until ctx ends.
func (d *Drain) Run(ctx context.Context, interval time.Duration, now func() time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	d.Sample(now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sample(now())
		}
	}
}

// Sample reads every queue once (one read lock) and folds the change since
// the previous sample into its averages. Deleted queues are forgotten.
func (d *Drain) Sample(now time.Time) {
	type obs struct {
		name           string
		depth, granted int64
	}
	var seen []obs
	d.state.Read(func(v fsm.View) {
		names := v.QueueNames()
		seen = make([]obs, 0, len(names))
		for _, name := range names {
			qv, ok := v.Queue(name)
			if !ok {
				continue
			}
			st := qv.Stats()
			granted, _ := qv.AppliedEvents()
			seen = append(seen, obs{name, st.Ready + st.Delayed + st.InFlight, granted})
		}
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	dt := now.Sub(d.last).Seconds()
	// The first sample, or one at the same instant, has no interval to
	// take a rate over: it only sets the baseline of new queues.
	fold := !d.last.IsZero() && dt > 0
	if fold || d.last.IsZero() {
		d.last = now
	}
	// Weight of this sample: 1 - e^(-dt/tau), so the averages forget at
	// the same pace whatever the interval.
	alpha := 1 - math.Exp(-dt/d.tau.Seconds())
	live := make(map[string]*drainQueue, len(seen))
	for _, o := range seen {
		q := d.queues[o.name]
		switch {
		case q == nil:
			q = &drainQueue{depth: o.depth, granted: o.granted, samples: 1}
		case fold:
			depthRate := float64(o.depth-q.depth) / dt
			// The grant count restarts at 0 when the node reloads its
			// state: a negative step is no rate.
			deliveryRate := math.Max(float64(o.granted-q.granted), 0) / dt
			if q.samples == 1 {
				q.depthRate, q.deliveryRate = depthRate, deliveryRate
			} else {
				q.depthRate += alpha * (depthRate - q.depthRate)
				q.deliveryRate += alpha * (deliveryRate - q.deliveryRate)
			}
			q.depth, q.granted = o.depth, o.granted
			q.samples++
		}
		live[o.name] = q
	}
	d.queues = live
}

// Estimate is queue's trend as of the last sample; ok is false for a
// queue not sampled yet.
func (d *Drain) Estimate(queue string) (DrainEstimate, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queues[queue]
	if q == nil {
		return DrainEstimate{}, false
	}
	return q.estimate(), true
}

func (q *drainQueue) estimate() DrainEstimate {
	e := DrainEstimate{Depth: q.depth, DepthChangePerSec: q.depthRate, DeliveriesPerSec: q.deliveryRate}
	switch {
	case q.depth == 0:
		e.State = DrainEmpty
	case q.samples < 2:
		e.State = DrainUnknown
	case q.depthRate <= -DrainEpsilon:
		e.State = DrainDraining
		e.EmptiesIn = time.Duration(float64(q.depth) / -q.depthRate * float64(time.Second))
	case q.depthRate >= DrainEpsilon:
		e.State = DrainGrowing
	default:
		e.State = DrainSteady
	}
	return e
}
