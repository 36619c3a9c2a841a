package transport

import (
	"context"
	"errors"
	"math"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxPerResponse bounds the deliveries sent in one LeaseResponse.
const maxPerResponse = 256

// Lease registers the stream with the leader's scheduler and pushes its
// deliveries. A follower answers NOT_LEADER so the client reconnects to
// the leader; when leadership moves the stream ends the same way.
func (s *Server) Lease(req *raftqv1.LeaseRequest, stream raftqv1.Broker_LeaseServer) error {
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return err
	}
	if req.MaxInFlight < 0 || req.MaxInFlight > MaxInFlight {
		return invalid("max_in_flight must be in [0, %d]", MaxInFlight)
	}
	if req.VisibilityTimeoutMs < 0 || req.VisibilityTimeoutMs > 366*24*3600*1000 {
		return invalid("visibility_timeout_ms out of range")
	}
	if req.Limit < 0 {
		return invalid("limit must not be negative")
	}
	if len(req.ConsumerName) > 255 {
		return invalid("consumer_name is longer than 255 bytes")
	}
	// Leadership first: a lagging follower may not know the queue yet, and
	// only the established leader's answer to "does it exist" counts. A
	// stream is never forwarded: the client follows the redirect.
	route, err := s.route(stream.Context())
	if err != nil {
		return err
	}
	if !route.Local {
		return redirectError(route.LeaderID, route.LeaderAddr)
	}
	maxInFlight := int(req.MaxInFlight)
	if maxInFlight == 0 {
		maxInFlight = 64
	}
	ctx := stream.Context()
	c, err := s.b.Lease(ctx, scheduler.ConsumerRequest{
		Queue:             req.Queue,
		Name:              req.ConsumerName,
		MaxInFlight:       maxInFlight,
		VisibilityTimeout: time.Duration(req.VisibilityTimeoutMs) * time.Millisecond,
		Limit:             int(min(req.Limit, math.MaxInt32)),
	})
	if err != nil {
		if errors.Is(err, scheduler.ErrNotLeader) {
			// Established as leader, but the term's scheduler is not
			// running (yet, or any more): send the client to whoever leads.
			if id, addr := s.b.Leader(); id != "" && id != s.b.ID() {
				return redirectError(id, addr)
			}
			return status.Error(codes.Unavailable, "leader is starting its scheduler; retry")
		}
		return toStatus(err)
	}
	defer c.Close()
	batch := make([]*raftqv1.Delivery, 0, maxPerResponse)
	for {
		select {
		case <-ctx.Done():
			return toStatus(context.Cause(ctx))
		case <-c.Done():
			if errors.Is(c.Err(), scheduler.ErrNotLeader) {
				// Just stepped down: name the new leader once one is known
				// (bounded wait), so the client goes straight there.
				route, err := s.route(ctx)
				if err != nil {
					return err
				}
				if route.Local {
					return status.Error(codes.Unavailable, "leadership changed; retry")
				}
				return redirectError(route.LeaderID, route.LeaderAddr)
			}
			return toStatus(c.Err())
		case d := <-c.Deliveries():
			batch = append(batch[:0], projectDelivery(d))
		drain:
			for len(batch) < maxPerResponse {
				select {
				case d := <-c.Deliveries():
					batch = append(batch, projectDelivery(d))
				default:
					break drain
				}
			}
			if err := stream.Send(&raftqv1.LeaseResponse{Messages: batch}); err != nil {
				// The deliveries are leased; Close releases them at once.
				return err
			}
			s.metrics.delivered.Add(float64(len(batch)))
		}
	}
}
