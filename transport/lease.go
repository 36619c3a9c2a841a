package transport

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm/state"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// maxPerResponse bounds the deliveries sent in one LeaseResponse.
const maxPerResponse = 256

// DefaultMaxBatchBytes bounds one LeaseResponse (when the request names no
// max_batch_bytes) and one PeekResponse, encoded: grpc-go's default
// receive limit, so a client with default options takes every response
// that holds more than one message. A larger single message is sent alone.
const DefaultMaxBatchBytes = 4 << 20

// Lease registers the stream with the leader's scheduler and pushes its
// deliveries. A follower answers NOT_LEADER so the client reconnects to
// the leader; when leadership moves the stream ends the same way.
func (s brokerService) Lease(req *raftqv1.LeaseRequest, stream raftqv1.Broker_LeaseServer) error {
	if err := checkQueueName("queue", req.GetQueue()); err != nil {
		return err
	}
	if req.MaxInFlight < 0 || req.MaxInFlight > MaxInFlight {
		return invalid("max_in_flight must be in [0, %d]", MaxInFlight)
	}
	if req.VisibilityTimeoutMs < 0 || req.VisibilityTimeoutMs > state.MaxDurationMs {
		return invalid("visibility_timeout_ms is %d, it must be in [0, %d] (0 to %s; 0 takes the queue's)",
			req.VisibilityTimeoutMs, int64(state.MaxDurationMs), state.HumanMs(state.MaxDurationMs))
	}
	if req.Limit < 0 {
		return invalid("limit must not be negative")
	}
	if req.MaxBatchBytes < 0 {
		return invalid("max_batch_bytes must not be negative")
	}
	if len(req.ConsumerName) > 255 {
		return invalid("consumer_name is longer than 255 bytes")
	}
	// Leadership first: a lagging follower may not know the queue yet, and
	// only the established leader's answer to "does it exist" counts. A
	// stream is never forwarded: the client follows the redirect.
	g, err := s.leaseTarget(stream.Context(), req.Queue)
	if err != nil {
		return err
	}
	maxInFlight := int(req.MaxInFlight)
	if maxInFlight == 0 {
		maxInFlight = 64
	}
	ctx := stream.Context()
	c, err := g.b.Lease(ctx, scheduler.ConsumerRequest{
		Queue:             req.Queue,
		Name:              req.ConsumerName,
		MaxInFlight:       maxInFlight,
		VisibilityTimeout: time.Duration(req.VisibilityTimeoutMs) * time.Millisecond,
		Limit:             int(min(req.Limit, math.MaxInt32)),
		Address:           peerAddr(ctx),
		Identity:          identityOf(ctx),
		Gone:              ctx.Done(),
	})
	if err != nil {
		if errors.Is(err, scheduler.ErrNotLeader) {
			// Established as leader, but the term's scheduler is not
			// running (yet, or any more): send the client to whoever leads.
			if id, addr := g.b.Leader(); id != "" && id != g.b.ID() {
				return groupRedirect(g.id, id, addr)
			}
			return status.Error(codes.Unavailable, "leader is starting its scheduler; retry")
		}
		return toStatus(err)
	}
	defer s.closeConsumer(c) // after the acks that reached us before the stream ended
	maxBytes := int(min(req.MaxBatchBytes, math.MaxInt32))
	if maxBytes == 0 {
		maxBytes = DefaultMaxBatchBytes
	}
	return s.push(ctx, g, stream, c, maxBytes)
}

// push sends c's deliveries on stream until either ends, batching what is
// ready into responses of at most maxPerResponse deliveries and maxBytes
// encoded bytes (one delivery larger than maxBytes goes alone): a client
// that refuses a response too large for it would lose the whole batch,
// each delivery counted as an attempt. A delivery that does not fit stays
// in the consumer's buffer until the next response: Take hands over only
// deliveries whose lease is still current at that moment, so a stream
// that was slow to send never sends a lease that lapsed (or was granted
// again) meanwhile; those go back to the queue uncounted.
func (s brokerService) push(ctx context.Context, g *dataGroup, stream raftqv1.Broker_LeaseServer, c *scheduler.Consumer, maxBytes int) error {
	batch := make([]*raftqv1.Delivery, 0, maxPerResponse)
	sent := make([]*state.Delivery, 0, maxPerResponse) // batch before projection, for metrics
	for {
		select {
		case <-ctx.Done():
			return toStatus(context.Cause(ctx))
		case <-c.Done():
			return s.leaseEnded(ctx, g, c)
		case <-c.Ready():
		}
		for more := true; more; {
			batch, sent = batch[:0], sent[:0]
			size := 0
			nowMs := g.b.NowMs()
			_, more = c.Take(func(d *state.Delivery) bool {
				if len(batch) >= maxPerResponse {
					return false
				}
				pd := projectDelivery(d)
				// What the client reckons its lease by, on its own clock
				// (Take hands over only leases whose deadline is ahead).
				pd.LeaseRemainingMs = max(d.LeaseDeadlineMs-nowMs, 1)
				n := responseEntrySize(pd)
				if len(batch) > 0 && size+n > maxBytes {
					return false
				}
				batch = append(batch, pd)
				sent = append(sent, d)
				size += n
				return true
			})
			if len(batch) == 0 {
				break // what was buffered had lapsed
			}
			if err := stream.Send(&raftqv1.LeaseResponse{Messages: batch}); err != nil {
				// The deliveries are leased; Close releases them at once.
				return err
			}
			s.metrics.delivered.Add(float64(len(batch)))
			g.b.Delivered(sent)
		}
	}
}

// leaseEnded is the status a Lease stream ends with when its consumer
// ended.
func (s brokerService) leaseEnded(ctx context.Context, g *dataGroup, c *scheduler.Consumer) error {
	if errors.Is(c.Err(), scheduler.ErrLimitReached) {
		// Every delivery the limit allowed was sent and settled: done.
		return nil
	}
	if errors.Is(c.Err(), scheduler.ErrNotLeader) {
		// Just stepped down: name the new leader once one is known
		// (bounded wait), so the client goes straight there.
		route, err := s.routeIn(ctx, g)
		if err != nil {
			return err
		}
		if route.Local {
			return status.Error(codes.Unavailable, "leadership changed; retry")
		}
		return groupRedirect(g.id, route.LeaderID, route.LeaderClientAddr)
	}
	return toStatus(c.Err())
}

// responseEntrySize is what d adds to the encoding of a response that
// lists it in field 1 (LeaseResponse.messages, PeekResponse.messages).
func responseEntrySize(d *raftqv1.Delivery) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(d))
}

// capBytes keeps the longest prefix of ds (at least one) whose response
// entries fit in maxBytes.
func capBytes(ds []*raftqv1.Delivery, maxBytes int) []*raftqv1.Delivery {
	size := 0
	for i, d := range ds {
		size += responseEntrySize(d)
		if i > 0 && size > maxBytes {
			return ds[:i]
		}
	}
	return ds
}

// identityOf is the authenticated caller's identity ("" with auth off).
func identityOf(ctx context.Context) string {
	if p := auth.PrincipalFrom(ctx); p != nil && p.Kind != auth.KindAnonymous {
		return p.Name
	}
	return ""
}

// peerAddr is the client's address as this server sees it ("" if unknown).
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
