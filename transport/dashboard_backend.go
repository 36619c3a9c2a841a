package transport

import (
	"context"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport/dashboard"
	"google.golang.org/grpc"
)

// dashBackend serves the dashboard from this node: the queue numbers from
// its own replicated state, and the leader-only calls through the same
// routing a gRPC client's call takes (here when this node leads, else one
// hop to the leader), so a follower's page shows what the leader knows.
type dashBackend struct{ s *Server }

var _ dashboard.Backend = dashBackend{}

// viaLeader serves one leader-only Broker call as the interceptors would:
// the caller's permission first (auth.Authorize), then the route.
func viaLeader[Req, Resp any](ctx context.Context, s *Server, method string, req Req, h func(context.Context, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	if err := s.cfg.Auth.Authorize(ctx, method, req); err != nil {
		return zero, err
	}
	out, err := s.atLeader(ctx, method, req, grpc.UnaryHandler(func(ctx context.Context, r any) (any, error) {
		return h(ctx, r.(Req))
	}))
	if err != nil {
		return zero, toStatus(err)
	}
	return out.(Resp), nil
}

func (d dashBackend) NodeID() string { return d.s.b.ID() }

// The dashboard's calls are checked as the gRPC methods they stand for
// (the caller is the HTTP middleware's principal), and lists and status
// are trimmed to what the caller may see.

func (d dashBackend) Status(ctx context.Context) (*raftqv1.StatusResponse, error) {
	resp, err := (&clusterService{s: d.s}).Status(ctx, &raftqv1.StatusRequest{})
	if err != nil {
		return nil, err
	}
	return d.s.cfg.Auth.Filter(ctx, resp).(*raftqv1.StatusResponse), nil
}

func (d dashBackend) Verify(ctx context.Context) (*raftqv1.VerifyResponse, error) {
	if err := d.s.cfg.Auth.Authorize(ctx, raftqv1.Cluster_Verify_FullMethodName, &raftqv1.VerifyRequest{}); err != nil {
		return nil, err
	}
	return (&clusterService{s: d.s}).Verify(ctx, &raftqv1.VerifyRequest{})
}

func (d dashBackend) LocalQueues(ctx context.Context) ([]*raftqv1.QueueInfo, error) {
	resp, err := brokerService{Server: d.s}.ListQueues(ctx, &raftqv1.ListQueuesRequest{})
	if err != nil {
		return nil, toStatus(err)
	}
	return d.s.cfg.Auth.Filter(ctx, resp).(*raftqv1.ListQueuesResponse).GetQueues(), nil
}

func (d dashBackend) LocalQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error) {
	req := &raftqv1.GetQueueRequest{Name: name}
	if err := d.s.cfg.Auth.Authorize(ctx, raftqv1.Broker_GetQueue_FullMethodName, req); err != nil {
		return nil, err
	}
	resp, err := brokerService{Server: d.s}.GetQueue(ctx, req)
	return resp.GetQueue(), toStatus(err)
}

func (d dashBackend) LeaderQueues(ctx context.Context) ([]*raftqv1.QueueInfo, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_ListQueues_FullMethodName, &raftqv1.ListQueuesRequest{}, brokerService{Server: d.s}.ListQueues)
	if err != nil {
		return nil, err
	}
	return d.s.cfg.Auth.Filter(ctx, resp).(*raftqv1.ListQueuesResponse).GetQueues(), nil
}

func (d dashBackend) LeaderQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_GetQueue_FullMethodName, &raftqv1.GetQueueRequest{Name: name, IncludeKeys: true}, brokerService{Server: d.s}.GetQueue)
	return resp.GetQueue(), err
}

func (d dashBackend) ListConsumers(ctx context.Context, queue string) ([]*raftqv1.ConsumerInfo, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_ListConsumers_FullMethodName, &raftqv1.ListConsumersRequest{Queue: queue}, brokerService{Server: d.s}.ListConsumers)
	return resp.GetConsumers(), err
}

func (d dashBackend) Peek(ctx context.Context, queue string, limit int32, deadLetter bool) ([]*raftqv1.Delivery, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Peek_FullMethodName, &raftqv1.PeekRequest{Queue: queue, Limit: limit, DeadLetter: deadLetter}, brokerService{Server: d.s}.Peek)
	return resp.GetMessages(), err
}

func (d dashBackend) Redrive(ctx context.Context, queue string, limit int64) (int64, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Redrive_FullMethodName, &raftqv1.RedriveRequest{Queue: queue, Limit: limit}, brokerService{Server: d.s}.Redrive)
	return resp.GetMoved(), err
}
