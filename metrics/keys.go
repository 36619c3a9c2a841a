package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// OtherKey is the key label of the series that sums every key beyond the
// top N of a queue.
const OtherKey = "_other"

// ThrottleSource reports a queue's throttle buckets as the leader's
// scheduler holds them; ok is false where this node keeps none (it is not
// the leader), so the family is left out rather than reported full.
type ThrottleSource func(queue string) (buckets []*raftqv1.ThrottleKeyStats, ok bool)

// KeysCollector exports per fairness key and per throttle key series,
// bounded: for each queue the top N keys get a series of their own and
// every other key is summed into one key="_other" series, so the label
// set never grows with the keys clients invent.
type KeysCollector struct {
	state     State
	throttles ThrottleSource
	top       int

	ready, tokens *prometheus.Desc
}

// NewKeysCollector keeps the top n keys per queue (n ≥ 1); throttles may
// be nil (no throttle family).
func NewKeysCollector(st State, throttles ThrottleSource, n int) *KeysCollector {
	l := []string{"queue", "key"}
	return &KeysCollector{
		state: st, throttles: throttles, top: max(n, 1),
		ready: prometheus.NewDesc("raftq_fairness_key_ready_messages",
			`Ready messages of a fairness key: the queue's top N keys by ready messages (--metrics-top-keys), the rest summed under key="_other".`, l, nil),
		tokens: prometheus.NewDesc("raftq_throttle_key_tokens",
			`Tokens in a throttle key's bucket (leader only): the queue's N emptiest buckets relative to their burst, the rest summed under key="_other".`, l, nil),
	}
}

// Describe sends the descriptors of both families.
func (c *KeysCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.tokens
}

type keyCount struct {
	key   string
	ready int64
}

// readKeys copies every queue's per-key ready counts under one read lock:
// O(active keys), the walk OldestReadyMs already makes.
func (c *KeysCollector) readKeys() (names []string, keys map[string][]keyCount) {
	keys = map[string][]keyCount{}
	c.state.Read(func(v fsm.View) {
		names = v.QueueNames()
		var prios []int32
		for _, name := range names {
			qv, ok := v.Queue(name)
			if !ok {
				continue
			}
			byKey := map[string]int{}
			var ks []keyCount
			prios = qv.Priorities(prios[:0])
			for _, p := range prios {
				for k, ok := qv.NextKey(p, 0); ok; k, ok = qv.NextKey(p, k.Seq) {
					i, seen := byKey[k.Key]
					if !seen {
						i = len(ks)
						byKey[k.Key] = i
						ks = append(ks, keyCount{key: k.Key})
					}
					ks[i].ready += int64(k.Ready)
				}
			}
			keys[name] = ks
		}
	})
	return names, keys
}

// Collect sends the top N keys of every queue and their _other sums.
func (c *KeysCollector) Collect(ch chan<- prometheus.Metric) {
	names, keys := c.readKeys()
	gauge := prometheus.GaugeValue
	for _, name := range names {
		ks := keys[name]
		// Largest backlog first; ties by key, so the series chosen are
		// stable from scrape to scrape.
		slices.SortFunc(ks, func(a, b keyCount) int {
			return cmp.Or(cmp.Compare(b.ready, a.ready), cmp.Compare(a.key, b.key))
		})
		var other int64
		folded := false
		for i, k := range ks {
			if i < c.top && k.key != OtherKey {
				ch <- prometheus.MustNewConstMetric(c.ready, gauge, float64(k.ready), name, k.key)
			} else {
				other, folded = other+k.ready, true
			}
		}
		if folded {
			ch <- prometheus.MustNewConstMetric(c.ready, gauge, float64(other), name, OtherKey)
		}
		if c.throttles != nil {
			c.collectThrottles(ch, name)
		}
	}
}

func (c *KeysCollector) collectThrottles(ch chan<- prometheus.Metric, queue string) {
	bs, ok := c.throttles(queue)
	if !ok || len(bs) == 0 {
		return
	}
	fill := func(b *raftqv1.ThrottleKeyStats) float64 { return b.GetTokens() / float64(max(b.GetBurst(), 1)) }
	// The most throttled (emptiest) buckets first.
	slices.SortFunc(bs, func(a, b *raftqv1.ThrottleKeyStats) int {
		return cmp.Or(cmp.Compare(fill(a), fill(b)), cmp.Compare(a.GetKey(), b.GetKey()))
	})
	var other float64
	folded := false
	for i, b := range bs {
		if i < c.top && b.GetKey() != OtherKey {
			ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.GaugeValue, b.GetTokens(), queue, b.GetKey())
		} else {
			other, folded = other+b.GetTokens(), true
		}
	}
	if folded {
		ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.GaugeValue, other, queue, OtherKey)
	}
}
