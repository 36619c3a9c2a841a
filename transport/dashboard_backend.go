package transport

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/raftq/raftq/dashboard"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

func (d dashBackend) NodeID() string { return d.s.legacy.b.ID() }

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

// LocalQueues is the queues of every data group this node runs a
// replica of, from those replicas.
func (d dashBackend) LocalQueues(ctx context.Context) ([]*raftqv1.QueueInfo, error) {
	var pages [][]*raftqv1.QueueInfo
	for _, t := range d.s.listTargets(d.s.placements()) {
		if t.local == nil {
			continue
		}
		resp, err := brokerService{Server: d.s}.ListQueues(d.s.withGroup(ctx, t.local), &raftqv1.ListQueuesRequest{})
		if err != nil {
			return nil, toStatus(err)
		}
		pages = append(pages, resp.GetQueues())
	}
	queues, _ := mergePages(pages, 0)
	return d.s.cfg.Auth.Filter(ctx, &raftqv1.ListQueuesResponse{Queues: queues}).(*raftqv1.ListQueuesResponse).GetQueues(), nil
}

// LocalQueue is a queue as this node's replica of its group holds it,
// or as its group's leader does when this node runs no replica of it.
func (d dashBackend) LocalQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error) {
	req := &raftqv1.GetQueueRequest{Name: name}
	if err := d.s.cfg.Auth.Authorize(ctx, raftqv1.Broker_GetQueue_FullMethodName, req); err != nil {
		return nil, err
	}
	t, err := d.s.queueTarget(ctx, name)
	if err != nil {
		return nil, err
	}
	if t.local == nil {
		return d.LeaderQueue(ctx, name)
	}
	resp, err := brokerService{Server: d.s}.GetQueue(d.s.withGroup(ctx, t.local), req)
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

func (d dashBackend) Peek(ctx context.Context, req *raftqv1.PeekRequest) ([]*raftqv1.Delivery, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Peek_FullMethodName, req, brokerService{Server: d.s}.Peek)
	return resp.GetMessages(), err
}

func (d dashBackend) Redrive(ctx context.Context, req *raftqv1.RedriveRequest) (int64, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Redrive_FullMethodName, req, brokerService{Server: d.s}.Redrive)
	return resp.GetMoved(), err
}

func (d dashBackend) CreateQueue(ctx context.Context, req *raftqv1.CreateQueueRequest) (*raftqv1.QueueInfo, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_CreateQueue_FullMethodName, req, brokerService{Server: d.s}.CreateQueue)
	return resp.GetQueue(), err
}

func (d dashBackend) UpdateQueue(ctx context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.QueueInfo, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_UpdateQueue_FullMethodName, req, brokerService{Server: d.s}.UpdateQueue)
	return resp.GetQueue(), err
}

func (d dashBackend) PurgeQueue(ctx context.Context, req *raftqv1.PurgeQueueRequest) (int64, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_PurgeQueue_FullMethodName, req, brokerService{Server: d.s}.PurgeQueue)
	return resp.GetPurged(), err
}

func (d dashBackend) DeleteQueue(ctx context.Context, req *raftqv1.DeleteQueueRequest) error {
	_, err := viaLeader(ctx, d.s, raftqv1.Broker_DeleteQueue_FullMethodName, req, brokerService{Server: d.s}.DeleteQueue)
	return err
}

func (d dashBackend) Enqueue(ctx context.Context, req *raftqv1.EnqueueRequest) ([]string, error) {
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Enqueue_FullMethodName, req, brokerService{Server: d.s}.Enqueue)
	return resp.GetMessageIds(), err
}

func (d dashBackend) Ack(ctx context.Context, queue string, ref *raftqv1.LeaseRef) error {
	defer d.s.dashHolds.release(ref.GetLeaseToken())
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Ack_FullMethodName, &raftqv1.AckRequest{Queue: queue, Acks: []*raftqv1.LeaseRef{ref}}, brokerService{Server: d.s}.Ack)
	return itemErr(resp.GetResults(), err)
}

func (d dashBackend) Nack(ctx context.Context, queue string, item *raftqv1.NackItem) error {
	defer d.s.dashHolds.release(item.GetLeaseToken())
	resp, err := viaLeader(ctx, d.s, raftqv1.Broker_Nack_FullMethodName, &raftqv1.NackRequest{Queue: queue, Nacks: []*raftqv1.NackItem{item}}, brokerService{Server: d.s}.Nack)
	return itemErr(resp.GetResults(), err)
}

// itemErr is the one item's result of an Ack or Nack as an error: the
// code and wording the API reports for it.
func itemErr(results []*raftqv1.ItemResult, err error) error {
	if err != nil {
		return err
	}
	if len(results) != 1 {
		return status.Errorf(codes.Internal, "%d results for one item", len(results))
	}
	if r := results[0]; !r.GetOk() {
		return status.Error(codes.Code(r.GetCode()), r.GetError())
	}
	return nil
}

// nodeResources is one node's memory, disk and start time.
type nodeResources struct {
	ResidentBytes     int64
	DiskFreeBytes     int64
	DiskKeepFreeBytes int64
	Started           time.Time
}

// resources is this node's memory, start time and data dir's free
// space, as /metrics has them, read cheaply: Status answers it to every
// peer that asks (the leader asks often), so the memory is one read of
// /proc/self/statm, the start time is read once, and the disk is the
// guard's last measurement.
func (s *Server) resources() nodeResources {
	out := nodeResources{Started: s.processStart(), ResidentBytes: residentBytes()}
	if r, ok := s.legacy.stats.Disk().Last(); ok {
		out.DiskFreeBytes, out.DiskKeepFreeBytes = int64(r.Free), int64(r.Limit)
	}
	return out
}

// processStartTime is process_start_time_seconds, from the process
// collector (zero where it has none).
func processStartTime() time.Time {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "process_start_time_seconds" && len(mf.GetMetric()) == 1 {
			return time.Unix(0, int64(mf.GetMetric()[0].GetGauge().GetValue()*float64(time.Second)))
		}
	}
	return time.Time{}
}

// residentBytes is process_resident_memory_bytes on Linux (0 elsewhere).
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
