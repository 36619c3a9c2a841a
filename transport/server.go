package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Raft is what the transport needs of the local cluster node
// (*cluster.Node satisfies it).
type Raft interface {
	Apply(ctx context.Context, cmd []byte) (any, error)
	IsLeader() bool
	LeaderReady() bool
	Leader() cluster.LeaderInfo
	WaitLeader(ctx context.Context) (cluster.LeaderInfo, error)
	Status() cluster.Status
	RemoveNode(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, toID string) (string, error)
	Snapshot(ctx context.Context) (uint64, error)
	AppliedIndex() uint64
}

// Scheduler is what the transport needs of the leader's scheduler.
type Scheduler interface {
	Register(ctx context.Context, req scheduler.ConsumerRequest) (*scheduler.Consumer, error)
	Consumers(queue string) int
	KeyStats(queue string) ([]*raftqv1.FairnessKeyStats, []*raftqv1.ThrottleKeyStats)
	// Settling marks leases whose acks are about to be proposed; done is
	// called once they have been applied or have failed.
	Settling(refs []*fsmv1.Ref) (done func())
}

// Config tunes the server.
type Config struct {
	NodeID string
	Logger *slog.Logger
	// MaxQueuedBytes is the node-wide admission limit on payload bytes held
	// in memory; 0 = unlimited.
	MaxQueuedBytes int64
	// LeaderWait bounds how long a call waits for a leader to be elected
	// before failing with NO_LEADER (default 3s, capped by the deadline).
	LeaderWait time.Duration
	// Registry receives the server's metrics; nil = a private registry.
	Registry *prometheus.Registry
}

// Coalescing limits: entries in flight before requests start to merge, and
// the most messages/bytes merged into one entry (one request always fits).
const (
	coalesceInFlight = 16
	coalesceItems    = 512
	coalesceBytes    = 512 << 10
)

// Server serves the Broker and Cluster services of one node.
type Server struct {
	raftqv1.UnimplementedBrokerServer
	cfg   Config
	log   *slog.Logger
	node  Raft
	state *fsm.FSM
	sched Scheduler
	peers *peerPool

	grpc    *grpc.Server
	health  *health.Server
	metrics *metrics

	enqueues *coalescer[*fsmv1.EnqueueBatch]
	acks     *coalescer[[]*fsmv1.Ref]

	// stopping is closed when Stop begins, ending EnqueueStreams that
	// would otherwise hold GracefulStop until its deadline.
	stopping  chan struct{}
	closeOnce sync.Once
}

// New builds the server; Serve starts it.
func New(cfg Config, node Raft, state *fsm.FSM, sched Scheduler) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = 3 * time.Second
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		node:     node,
		state:    state,
		sched:    sched,
		peers:    newPeerPool(),
		health:   health.NewServer(),
		stopping: make(chan struct{}),
	}
	s.metrics = newMetrics(cfg.Registry, s)
	propose := Proposer{Node: node, FSM: state}.Propose
	s.enqueues = newCoalescer(coalesceInFlight, coalesceItems, coalesceBytes, propose,
		func(reqs []*fsmv1.EnqueueBatch) *fsmv1.Command {
			return &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: reqs}}}
		},
		func(b *fsmv1.EnqueueBatch) (int, int) {
			n := 0
			for _, m := range b.Messages {
				n += len(m.Payload)
			}
			return len(b.Messages), n
		})
	s.acks = newCoalescer(coalesceInFlight, coalesceItems, coalesceBytes, propose,
		func(reqs [][]*fsmv1.Ref) *fsmv1.Command {
			var all []*fsmv1.Ref
			for _, r := range reqs {
				all = append(all, r...)
			}
			return &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: all}}}
		},
		func(refs []*fsmv1.Ref) (int, int) { return len(refs), 0 })
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.metrics.unary, s.forwardUnary),
		grpc.ChainStreamInterceptor(s.metrics.stream),
		grpc.MaxRecvMsgSize(64<<20),
		// Reused handler goroutines keep their grown stacks: profiles of a
		// busy leader showed stack growth at ~8% of CPU without them.
		grpc.NumStreamWorkers(64),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	raftqv1.RegisterBrokerServer(s.grpc, s)
	raftqv1.RegisterClusterServer(s.grpc, &clusterService{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s
}

// Serve accepts gRPC connections on lis until Stop.
func (s *Server) Serve(lis net.Listener) error {
	return s.grpc.Serve(lis)
}

// Stop ends every stream and closes connections, waiting up to ctx for
// in-flight unary calls.
func (s *Server) Stop(ctx context.Context) {
	s.closeOnce.Do(func() {
		close(s.stopping)
		s.health.Shutdown()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
		s.enqueues.close()
		s.acks.close()
		s.peers.close()
	})
}

// now is the leader's clock stamped on commands.
func now() int64 { return time.Now().UnixMilli() }

// apply proposes cmd on this node (which must be the leader) and returns the
// FSM's result; a whole-command failure comes back as the error.
func (s *Server) apply(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	if cmd.NowMs == 0 {
		cmd.NowMs = now()
	}
	res, err := Proposer{Node: s.node, FSM: s.state}.Propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return res, res.Failure()
}

// Proposer adapts a Raft node to scheduler.Proposer.
type Proposer struct {
	Node Raft
	// FSM, when set, is told what each proposal encodes, so that it need
	// not decode the leader's own entries (fsm.FSM.Proposed).
	FSM *fsm.FSM
}

// Propose encodes and applies cmd, returning the FSM result.
func (p Proposer) Propose(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	if p.FSM != nil {
		defer p.FSM.Proposed(data, cmd)()
	}
	out, err := p.Node.Apply(ctx, data)
	if err != nil {
		return nil, err
	}
	res, ok := out.(fsm.Result)
	if !ok {
		return nil, fmt.Errorf("unexpected apply response %T", out)
	}
	return res, nil
}
