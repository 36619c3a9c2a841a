package broker

import (
	"time"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// HandBack is a batch of leases this node granted while it led, on one
// queue, whose deliveries no consumer ever took: its term ended (leadership
// moved) before it could roll them back itself. They were never sent, so
// they must not count as attempts; the serving layer hands them to the
// leader as unprocessed nacks (transport does it through its ordinary
// forwarding path) and gives up at Deadline, after which they expire on
// the leader, counted, as if this node had died without saying.
type HandBack struct {
	Queue    string
	Refs     []LeaseRef
	Deadline time.Time
}

const (
	// handBackTimeout bounds how long a deposed leader tries to hand back
	// what it never sent. The new leader waits its lease grace (5 s by
	// default) and then the leases' own deadlines before expiring them; a
	// hand-back later than that finds a stale token and changes nothing.
	handBackTimeout = 15 * time.Second
	// handBackBatch is the most leases in one HandBack (one Nack call).
	handBackBatch = 256
	// handBackQueue is how many batches wait for the serving layer; more
	// are dropped (and expire, counted), so a node with nobody taking them
	// holds a bounded amount.
	handBackQueue = 64
)

// HandBacks delivers the batches to hand back, for the serving layer to
// forward to the leader.
func (b *Broker) HandBacks() <-chan HandBack { return b.handBacks }

// handBack is the scheduler's Config.HandBack: it batches refs by queue
// and queues them for the serving layer without blocking.
func (b *Broker) handBack(refs []*fsmv1.Ref) {
	deadline := time.Now().Add(handBackTimeout)
	var order []string
	byQueue := map[string][]LeaseRef{}
	for _, r := range refs {
		q := r.GetQueue()
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], LeaseRef{Queue: q, MessageID: r.GetMessageId(), Token: r.GetLeaseToken()})
	}
	for _, q := range order {
		all := byQueue[q]
		for len(all) > 0 {
			n := min(len(all), handBackBatch)
			hb := HandBack{Queue: q, Refs: all[:n:n], Deadline: deadline}
			all = all[n:]
			select {
			case b.handBacks <- hb:
			default:
				b.log.Warn("hand-back queue full: deliveries never sent will expire on the leader as counted attempts", "queue", q, "leases", len(hb.Refs))
			}
		}
	}
	b.log.Info("handing back deliveries granted but never sent", "leases", len(refs))
}
