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
	// only the leader's answer to "does it exist" counts.
	if !s.node.IsLeader() {
		li, err := s.leader(stream.Context())
		if err != nil {
			return err
		}
		if li.ID != s.cfg.NodeID {
			return redirectError(li.ID, li.GRPCAddr)
		}
	}
	if err := s.waitEstablished(stream.Context()); err != nil {
		return err
	}
	if err := s.state.HasQueue(req.Queue); err != nil {
		return toStatus(err)
	}
	maxInFlight := int(req.MaxInFlight)
	if maxInFlight == 0 {
		maxInFlight = 64
	}
	ctx := stream.Context()
	c, err := s.sched.Register(ctx, scheduler.ConsumerRequest{
		Queue:             req.Queue,
		Name:              req.ConsumerName,
		MaxInFlight:       maxInFlight,
		VisibilityTimeout: time.Duration(req.VisibilityTimeoutMs) * time.Millisecond,
		Limit:             int(min(req.Limit, math.MaxInt32)),
	})
	if err != nil {
		if errors.Is(err, scheduler.ErrNotLeader) {
			li, err := s.leader(ctx)
			if err != nil {
				return err
			}
			if li.ID == s.cfg.NodeID {
				return status.Error(codes.Unavailable, "leader is starting its scheduler; retry")
			}
			return redirectError(li.ID, li.GRPCAddr)
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
				li, err := s.leader(ctx)
				if err != nil {
					return err
				}
				return redirectError(li.ID, li.GRPCAddr)
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
