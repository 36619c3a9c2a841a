package broker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/raftq/raftq/fsm/logconv"
	"github.com/raftq/raftq/peers"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/raftgroup"
)

// HandBack is a batch of leases this node granted while it led, on one
// queue, whose deliveries no consumer ever took: its term ended (leadership
// moved) before it could roll them back itself. They were never sent, so
// they must not count as attempts: the hand-back sender (a node duty)
// hands them to the leader as unprocessed nacks, routed as any call, and
// gives up at Deadline, after which they expire on the leader, counted,
// as if this node had died without saying.
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
	// handBackQueue is how many batches wait for the sender; more are
	// dropped (and expire, counted), so a node with nobody taking them
	// holds a bounded amount.
	handBackQueue = 64
	// handBackFlush bounds the one last try of what is queued when the
	// group closes.
	handBackFlush = 2 * time.Second
)

// handBackSender holds what lost terms never sent and hands it to the
// leader (a node duty, leader.go): its own type, given at construction
// how it reaches the leader (the group's routing, its Nack and the peer
// connections), so the group's type keeps none of its steps. It exists
// before the scheduler, whose Config.HandBack is its add: nothing is
// bound late.
type handBackSender struct {
	log *slog.Logger
	// queue carries the batches to the sender, bounded (handBackQueue).
	queue chan HandBack
	peers *peers.Pool // nil: only a local leader can take a batch
	// route and nack are the group's (Broker.Route, Broker.Nack): where
	// a leader-only call goes, and the Nack an established leader
	// serves itself.
	route func(ctx context.Context, wait time.Duration) (Route, error)
	nack  func(ctx context.Context, items []NackItem) ([]error, error)
}

// add is the scheduler's Config.HandBack: it batches refs by queue
// and queues them for the hand-back sender without blocking.
func (h *handBackSender) add(refs []*fsmv1.Ref) {
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
			case h.queue <- hb:
			default:
				h.log.Warn("hand-back queue full: deliveries never sent will expire on the leader as counted attempts", "queue", q, "leases", len(hb.Refs))
			}
		}
	}
	h.log.Info("handing back deliveries granted but never sent", "leases", len(refs))
}

// run is the hand-back sender, a node duty (leader.go): it
// hands each batch to the leader until ctx ends. Then it still tries
// what is queued once, without retrying, for at most handBackFlush: a
// node that hands leadership over just before it stops has just queued
// its own. Close stops the node duties before the coalescers and the Raft
// node, and the host closes the peer connections after Close, so both
// paths are still there.
func (h *handBackSender) run(ctx context.Context, _ uint64) {
	for {
		select {
		case hb := <-h.queue:
			h.send(ctx, hb, true)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), handBackFlush)
			defer cancel()
			for {
				select {
				case hb := <-h.queue:
					h.send(fctx, hb, false)
				default:
					return
				}
			}
		}
	}
}

// handBackLeaderWait bounds one wait for a leader to be elected; the
// batch's deadline bounds the retries.
const handBackLeaderWait = 3 * time.Second

// send hands one batch to the leader as an unprocessed Nack, which
// returns each lease still held under its token to the queue without
// counting the attempt. It goes where any leader-only call goes (Route):
// served here if this node leads again, otherwise sent to the leader at
// its peer address (Config.Peers), retried with back-off while no leader
// can take it (retry), until hb.Deadline or ctx's end.
func (h *handBackSender) send(ctx context.Context, hb HandBack, retry bool) {
	ctx, cancel := context.WithDeadline(ctx, hb.Deadline)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		returned, err := h.nackAtLeader(ctx, hb)
		if err == nil {
			// A lease that is not returned was settled or expired meanwhile.
			h.log.Info("handed back deliveries never sent", "queue", hb.Queue, "leases", len(hb.Refs), "returned", returned)
			return
		}
		if !retryableAtLeader(err) || ctx.Err() != nil {
			h.log.Warn("hand-back failed: the deliveries will expire on the leader as counted attempts", "queue", hb.Queue, "leases", len(hb.Refs), "err", err)
			return
		}
		if !retry {
			h.log.Warn("hand-back not retried: the node is stopping; the deliveries will expire on the leader as counted attempts", "queue", hb.Queue, "leases", len(hb.Refs), "err", err)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(wait*2, time.Second)
	}
}

// nackAtLeader nacks hb's leases, unprocessed, on the leader: here when
// this node is the established leader, else through the peer connection
// to the leader, as any call is forwarded. It returns how many leases
// were returned.
func (h *handBackSender) nackAtLeader(ctx context.Context, hb HandBack) (int, error) {
	route, err := h.route(ctx, handBackLeaderWait)
	if err != nil {
		return 0, err
	}
	if route.Local {
		items := make([]NackItem, len(hb.Refs))
		for i, r := range hb.Refs {
			items[i] = NackItem{Ref: r, Unprocessed: true}
		}
		results, err := h.nack(ctx, items)
		if err != nil {
			return 0, err
		}
		returned := 0
		for _, e := range results {
			if e == nil {
				returned++
			}
		}
		return returned, nil
	}
	if h.peers == nil {
		return 0, errNoPeers
	}
	conn, err := h.peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return 0, err
	}
	req := &raftqv1.NackRequest{Queue: hb.Queue, Nacks: make([]*raftqv1.NackItem, len(hb.Refs))}
	for i, r := range hb.Refs {
		req.Nacks[i] = &raftqv1.NackItem{MessageId: logconv.FormatID(r.MessageID), LeaseToken: logconv.FormatID(r.Token), Unprocessed: true}
	}
	resp, err := raftqv1.NewBrokerClient(conn).Nack(ctx, req)
	if err != nil {
		return 0, err
	}
	returned := 0
	for _, r := range resp.GetResults() {
		if r.GetOk() {
			returned++
		}
	}
	return returned, nil
}

// retryableAtLeader: the call changed nothing because no leader could
// take it just then (none elected, leadership moving, the leader out of
// reach), so a later try may succeed.
func retryableAtLeader(err error) bool {
	return errors.Is(err, ErrNoLeader) || errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, raftgroup.ErrLeadershipLost) ||
		status.Code(err) == codes.Unavailable
}
