package transport

import (
	"context"
	"time"

	"github.com/raftq/raftq/broker"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// handBackLoop forwards the broker's hand-backs (deliveries this node
// granted while it led and never sent) to the leader. When Stop begins it
// still hands back what is queued (a node that hands leadership over just
// before stopping has just queued its own), without retrying, then
// returns; ctx ends when Stop's own deadline does.
func (s *Server) handBackLoop(ctx context.Context) {
	defer close(s.handBackDone)
	for {
		select {
		case hb := <-s.b.HandBacks():
			s.handBack(ctx, hb)
		case <-s.stopping:
			for {
				select {
				case hb := <-s.b.HandBacks():
					s.handBack(ctx, hb)
				default:
					return
				}
			}
		}
	}
}

// handBack hands one batch to the leader as an unprocessed Nack, which
// returns each lease still held under its token to the queue without
// counting the attempt. It goes the way any Nack goes: served here if this
// node leads again, otherwise forwarded one hop to the leader, retried
// (backing off) while no leader can take it, until hb.Deadline or until
// the server stops.
func (s *Server) handBack(ctx context.Context, hb broker.HandBack) {
	ctx, cancel := context.WithDeadline(ctx, hb.Deadline)
	defer cancel()
	req := &raftqv1.NackRequest{Queue: hb.Queue, Nacks: make([]*raftqv1.NackItem, len(hb.Refs))}
	for i, r := range hb.Refs {
		req.Nacks[i] = &raftqv1.NackItem{MessageId: FormatID(r.MessageID), LeaseToken: FormatID(r.Token), Unprocessed: true}
	}
	local := func(ctx context.Context, req any) (any, error) {
		return brokerService{Server: s}.Nack(ctx, req.(*raftqv1.NackRequest))
	}
	wait := 50 * time.Millisecond
	for {
		out, err := s.atLeader(ctx, raftqv1.Broker_Nack_FullMethodName, req, local)
		if err == nil {
			returned := 0
			for _, r := range out.(*raftqv1.NackResponse).GetResults() {
				if r.GetOk() {
					returned++
				}
			}
			// A lease that is not returned was settled or expired meanwhile.
			s.log.Info("handed back deliveries never sent", "queue", hb.Queue, "leases", len(hb.Refs), "returned", returned)
			return
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			s.log.Warn("hand-back failed: the deliveries will expire on the leader as counted attempts", "queue", hb.Queue, "leases", len(hb.Refs), "err", err)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-s.stopping:
			t.Stop()
			s.log.Warn("hand-back not retried: the server is stopping; the deliveries will expire on the leader as counted attempts", "queue", hb.Queue, "leases", len(hb.Refs), "err", err)
			return
		}
		wait = min(wait*2, time.Second)
	}
}
