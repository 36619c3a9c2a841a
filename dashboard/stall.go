package dashboard

import (
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// consumerRow is one consumer on a queue's page.
type consumerRow struct {
	*raftqv1.ConsumerInfo
	// Stalled: it holds leases, may be granted nothing more (credit 0)
	// and has acked nothing for at least the dashboard's StallAfter. Its
	// leases will expire and be delivered again, so the queue's drain
	// estimate reads "steady" while nothing gets done.
	Stalled bool
	// NoAckFor is how long its ack count has stood still, as far as this
	// node has watched it ("" when it acked since the last look).
	NoAckFor string
}

// stallTracker remembers, per consumer, its ack count and since when it
// has stood still: ConsumerInfo has counts, not the time of the last ack,
// so a stall is seen by looking more than once. A consumer seen for the
// first time that has acked nothing counts from when it connected; one
// that has acked counts from the first look. Memory is bounded by the
// consumers of the queues looked at: a look drops the queue's consumers
// that are gone, and queues not looked at for an hour are dropped.
type stallTracker struct {
	after time.Duration
	mu    sync.Mutex
	seen  map[string]*queueStalls // by queue
}

type queueStalls struct {
	at        time.Time // of the last look
	consumers map[string]ackObs
}

type ackObs struct {
	acked int64
	since time.Time // the ack count has been acked since then
}

func newStallTracker(after time.Duration) *stallTracker {
	return &stallTracker{after: after, seen: map[string]*queueStalls{}}
}

// forgetAfter is how long a queue nobody looks at keeps its observations.
const forgetAfter = time.Hour

// consumerKey identifies a consumer across looks: the leader's id, which
// a new stream never reuses.
func consumerKey(c *raftqv1.ConsumerInfo) string {
	if c.GetId() != "" {
		return c.GetId()
	}
	return c.GetName() + "\x00" + c.GetAddress()
}

// observe records a look at queue's consumers at now and flags the
// stalled ones.
func (t *stallTracker) observe(now time.Time, queue string, cs []*raftqv1.ConsumerInfo) []consumerRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	for q, s := range t.seen {
		if now.Sub(s.at) > forgetAfter {
			delete(t.seen, q)
		}
	}
	prev := t.seen[queue]
	next := &queueStalls{at: now, consumers: make(map[string]ackObs, len(cs))}
	rows := make([]consumerRow, len(cs))
	for i, c := range cs {
		k := consumerKey(c)
		obs, ok := ackObs{}, false
		if prev != nil {
			obs, ok = prev.consumers[k]
		}
		if !ok || obs.acked != c.GetAcked() {
			obs = ackObs{acked: c.GetAcked(), since: now}
			if !ok && c.GetAcked() == 0 && c.GetConnectedSinceMs() > 0 {
				obs.since = time.UnixMilli(c.GetConnectedSinceMs())
			}
		}
		next.consumers[k] = obs
		still := max(now.Sub(obs.since), 0)
		rows[i] = consumerRow{ConsumerInfo: c}
		if still >= time.Second {
			rows[i].NoAckFor = humanDuration(still.Round(time.Second))
		}
		rows[i].Stalled = c.GetInFlight() > 0 && c.GetCredit() <= 0 && still >= t.after
	}
	t.seen[queue] = next
	return rows
}
