package scheduler

import (
	"math"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// bucket is a token bucket kept as GCRA state: tat is the theoretical
// arrival time of the next token in nanoseconds since the term's anchor.
// Tokens at time t = burst - (max(tat, t) - t) / interval. Times are
// float64 nanoseconds relative to the anchor, so integral intervals (rates
// that divide 1e9) are exact for months.
type bucket struct {
	rate     float64 // as configured
	burstCfg int32   // as configured (effective: 0 already means 1)
	interval float64 // ns per token
	burst    float64 // tokens, >= 1
	tat      float64
}

// maxInterval keeps tiny rates from producing infinities.
const maxInterval = 1e18

func newBucket(r *fsmv1.ThrottleRule, now float64) *bucket {
	b := &bucket{}
	b.setRule(r, now, true)
	return b
}

// setRule applies a (possibly changed) rule. A new bucket starts full; a
// changed one keeps its tokens, clamped to the new burst.
func (b *bucket) setRule(r *fsmv1.ThrottleRule, now float64, fresh bool) {
	if !fresh && r.GetRatePerSec() == b.rate && r.GetBurst() == b.burstCfg {
		return
	}
	tokens := 0.0
	if !fresh {
		tokens = b.tokens(now)
	}
	b.rate, b.burstCfg = r.GetRatePerSec(), r.GetBurst()
	b.burst = float64(max(r.GetBurst(), 1))
	b.interval = maxInterval
	if b.rate > 0 {
		b.interval = min(1e9/b.rate, maxInterval)
	}
	if fresh {
		tokens = b.burst
	}
	tokens = min(max(tokens, 0), b.burst)
	b.tat = now + (b.burst-tokens)*b.interval
}

func (b *bucket) tokens(now float64) float64 {
	t := b.burst - (max(b.tat, now)-now)/b.interval
	return min(max(t, 0), b.burst)
}

// conforms reports whether one token is available at now.
func (b *bucket) conforms(now float64) bool {
	return max(b.tat, now)-now <= (b.burst-1)*b.interval
}

// take spends one token (the caller checked conforms).
func (b *bucket) take(now float64) { b.tat = max(b.tat, now) + b.interval }

// nextToken is the instant (ns since anchor) one token is available.
func (b *bucket) nextToken() float64 { return b.tat - (b.burst-1)*b.interval }

// nsToTime converts anchor-relative nanoseconds to an instant, rounding up
// so a timer never fires before the token exists.
func nsToTime(anchor time.Time, ns float64) time.Time {
	c := math.Ceil(ns)
	if c > float64(math.MaxInt64/2) {
		c = float64(math.MaxInt64 / 2)
	}
	return anchor.Add(time.Duration(c))
}

// buckets are one queue's token buckets, by throttle key, kept by the
// caller across picks (leader-only rate state; see DESIGN.md).
type buckets struct {
	cfg *fsmv1.QueueConfig // the config the buckets were last synced with
	m   map[string]*bucket
	// parked are the fairness keys a pick found wholly throttled (every
	// throttle group's next message refused), with the instant the first
	// of their buckets has a token again: until then, and unless the key
	// gains a throttle group or re-activates, picking passes them by at
	// the cost of one lookup. Cleared when the rules change.
	parked map[parkKey]parked
}

type parkKey struct {
	prio int32
	key  string
}

type parked struct {
	seq, groupGen uint64  // the key's activation and group generation when parked
	untilNs       float64 // when its earliest blocking bucket has a token
}

// maxStaleParked bounds the parked entries of keys no longer active
// beyond the queue's ready messages (an entry is dropped when its key is
// next visited; keys that emptied are not).
const maxStaleParked = 1024

// sync brings the buckets in line with the queue's throttle rules when its
// config changed (UpdateQueue): changed rules keep their tokens, clamped;
// removed rules drop their bucket.
func (bk *buckets) sync(cfg *fsmv1.QueueConfig, now float64) {
	if cfg == bk.cfg {
		return
	}
	bk.cfg = cfg
	clear(bk.parked)
	rules := cfg.GetThrottles()
	for k, b := range bk.m {
		if r := rules[k]; r == nil {
			delete(bk.m, k)
		} else {
			b.setRule(r, now, false)
		}
	}
}

// get is the bucket of throttle key k under rule r, created full on first use.
func (bk *buckets) get(k string, r *fsmv1.ThrottleRule, now float64) *bucket {
	b := bk.m[k]
	if b == nil {
		if bk.m == nil {
			bk.m = map[string]*bucket{}
		}
		b = newBucket(r, now)
		bk.m[k] = b
	}
	return b
}

// isParked reports whether the key k at prio is parked at now, and if so
// when it may deliver again.
func (bk *buckets) isParked(prio int32, k fsm.KeyInfo, now float64) (untilNs float64, ok bool) {
	pk, found := bk.parked[parkKey{prio, k.Key}]
	if !found {
		return 0, false
	}
	if pk.seq != k.Seq || pk.groupGen != k.GroupGen || now >= pk.untilNs {
		delete(bk.parked, parkKey{prio, k.Key})
		return 0, false
	}
	return pk.untilNs, true
}

// park records that every throttle group of k at prio is throttled until
// untilNs.
func (bk *buckets) park(prio int32, k fsm.KeyInfo, untilNs float64, ready int64) {
	if bk.parked == nil {
		bk.parked = map[parkKey]parked{}
	}
	if int64(len(bk.parked)) > ready+maxStaleParked {
		clear(bk.parked) // mostly keys that emptied since: forget them all
	}
	bk.parked[parkKey{prio, k.Key}] = parked{seq: k.Seq, groupGen: k.GroupGen, untilNs: untilNs}
}
