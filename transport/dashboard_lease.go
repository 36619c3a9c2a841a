package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The dashboard's "get one message" is a Lease stream with limit 1 that
// the node itself holds open: a lease lives as long as its stream (a
// stream that ends releases what its consumer holds), and a browser has
// no stream, only requests. So the node serving the page runs the stream
// (the Lease handler itself when it leads, a gRPC Lease call to the
// leader when it follows, with the caller's credentials either way) and
// keeps it open until the page acks or nacks the message, the lease's
// deadline passes, or the server stops. The ack or nack goes the way any
// Ack goes (forwarded to the leader) and only after it has answered is
// the stream closed, so the settle is applied before the release.

// leaseHolds are the dashboard's open single-message streams, by lease
// token.
type leaseHolds struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed to end the hold
	wg   sync.WaitGroup
}

func newLeaseHolds() *leaseHolds { return &leaseHolds{held: map[string]chan struct{}{}} }

// release ends the hold of the lease token, if one is held.
func (h *leaseHolds) release(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.held[token]; ok {
		close(c)
		delete(h.held, token)
	}
}

// wait returns once every hold has ended (the server's stopping ends
// them).
func (h *leaseHolds) wait() { h.wg.Wait() }

// holdMargin is how long past the lease's deadline a hold keeps its
// stream, so a settle sent just before the deadline is not beaten by
// the release.
const holdMargin = 2 * time.Second

// localLeaseStream is the server side of a Lease stream that the
// dashboard runs in-process: what the handler sends goes to out.
type localLeaseStream struct {
	grpc.ServerStream // nil: the Lease handler uses Send and Context only
	ctx               context.Context
	out               chan<- *raftqv1.Delivery
}

func (s *localLeaseStream) Context() context.Context { return s.ctx }
func (s *localLeaseStream) Send(r *raftqv1.LeaseResponse) error {
	for _, d := range r.GetMessages() {
		select {
		case s.out <- d:
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
	return nil
}

func (d dashBackend) Get(ctx context.Context, req *raftqv1.LeaseRequest, wait time.Duration) (*raftqv1.Delivery, error) {
	if err := d.s.cfg.Auth.Authorize(ctx, raftqv1.Broker_Lease_FullMethodName, req); err != nil {
		return nil, err
	}
	_, route, err := d.s.queueRoute(ctx, req.GetQueue())
	if err != nil {
		return nil, err
	}
	// The stream outlives this request: a context of its own, keeping
	// the caller (the principal) but not the request's deadline.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	deliveries := make(chan *raftqv1.Delivery, 1)
	ended := make(chan error, 1)
	h := d.s.dashHolds
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if route.Local {
			ended <- brokerService{Server: d.s}.Lease(req, &localLeaseStream{ctx: hctx, out: deliveries})
			return
		}
		ended <- d.remoteLease(hctx, route.LeaderID, route.LeaderAddr, req, deliveries)
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var got *raftqv1.Delivery
	select {
	case got = <-deliveries:
	case err = <-ended:
		cancel()
		if err == nil {
			err = status.Error(codes.Unavailable, "the lease stream ended before delivering")
		}
		return nil, toStatus(err)
	case <-timer.C:
	case <-ctx.Done():
	case <-d.s.stopping:
	}
	if got == nil {
		cancel()
		<-ended
		// Delivered just as the wait ran out: the stream's end has
		// released it (counted as an attempt), so it is not shown.
		return nil, ctx.Err()
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.held[got.GetLeaseToken()] = done
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer cancel()
		until := time.Until(time.UnixMilli(got.GetLeaseDeadlineMs())) + holdMargin
		t := time.NewTimer(max(until, holdMargin))
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			h.release(got.GetLeaseToken())
		case <-ended:
			h.release(got.GetLeaseToken())
			return
		case <-d.s.stopping:
			h.release(got.GetLeaseToken())
		}
		cancel()
		<-ended
	}()
	return got, nil
}

// remoteLease runs the Lease stream at the leader, with the caller's
// credentials (auth.Outgoing: its bearer token, or its identity headers
// that the leader honours from a node certificate), and passes on what
// it delivers until ctx ends.
func (d dashBackend) remoteLease(ctx context.Context, leaderID, leaderAddr string, req *raftqv1.LeaseRequest, out chan<- *raftqv1.Delivery) error {
	conn, err := d.s.peers.Get(leaderID, leaderAddr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "cannot reach the leader %s: %v", leaderID, err)
	}
	stream, err := raftqv1.NewBrokerClient(conn).Lease(d.s.cfg.Auth.Outgoing(ctx), req)
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, m := range resp.GetMessages() {
			select {
			case out <- m:
			case <-ctx.Done():
				return nil
			}
		}
	}
}
