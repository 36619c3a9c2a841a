package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/broker"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/raftgroup"
)

// replicaAskTimeout bounds asking one node for its digest (the leader's,
// to check a divergence report) or for a repair.
const replicaAskTimeout = 5 * time.Second

// Diverged reports whether this node learnt that its state differs from
// the replicas' (and so serves no reads from it): the data group keeps
// it (broker.Operator.Diverged), since its replica check, a leader duty,
// finds it too.
func (s *Server) Diverged() bool { return s.legacy.ops.Diverged() }

// RepairRestart is closed when this node, whose state diverged, has been
// removed from the configuration and has asked for its Raft state to be
// set aside: the caller stops the node (without leaving) and starts it
// again on the same data dir, which then joins with no state.
func (s *Server) RepairRestart() <-chan struct{} { return s.restart }

// ReportDivergence is the leader telling this node that its digest at a
// checkpoint differed (the leader's replica check, broker/replica.go).
// The node trusts no one's word for it: it asks the leader it knows for
// the leader's own digest at that checkpoint, and stops serving reads
// only if that is the reported digest and its own differs. (A leader
// whose state is the odd one out judges itself in its check and never
// reports others.)
func (c *clusterService) ReportDivergence(ctx context.Context, req *raftqv1.ReportDivergenceRequest) (*raftqv1.ReportDivergenceResponse, error) {
	if req.GetIndex() == 0 || req.GetDigest() == "" {
		return nil, invalid("index and digest are required")
	}
	d, err := c.digestAt(ctx, req.Index)
	if err != nil {
		return nil, err
	}
	if d == req.Digest {
		return &raftqv1.ReportDivergenceResponse{Digest: d}, nil
	}
	route, err := c.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if route.Local {
		return nil, status.Error(codes.FailedPrecondition, "this node leads: it compares its own digest with the replicas' itself")
	}
	conn, err := c.s.peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return nil, toStatus(err)
	}
	lctx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
	ld, err := raftqv1.NewClusterClient(conn).LocalDigest(lctx, &raftqv1.LocalDigestRequest{Index: req.Index})
	cancel()
	if err != nil {
		return nil, err
	}
	if ld.GetDigest() != req.Digest {
		return nil, status.Errorf(codes.FailedPrecondition, "the leader's digest at %d is not the reported one", req.Index)
	}
	c.s.legacy.ops.MarkDiverged(req.Index, d, req.Digest, req.GetLeaderId())
	if req.GetRemoved() {
		reason := fmt.Sprintf("state diverged at checkpoint %d (digest %s, the replicas' %s); removed by %s for repair", req.Index, d, req.Digest, req.GetLeaderId())
		if err := raftgroup.RequestWipe(c.s.legacy.b.DataDir(), reason); err != nil {
			return nil, err
		}
		c.s.log.Warn("removed for repair: restarting with this node's Raft state set aside", "leader", req.GetLeaderId())
		c.s.restartOnce.Do(func() { close(c.s.restart) })
	}
	return &raftqv1.ReportDivergenceResponse{Diverged: true, Digest: d}, nil
}

// maxRecountQueues bounds one RecountQueues request: every replica
// recounts the named queues inside Apply.
const maxRecountQueues = 1024

// RecountQueues is a node whose counter audit found drift asking this
// leader (the interceptor forwards it here) to commit RecountQueues.
func (c *clusterService) RecountQueues(ctx context.Context, req *raftqv1.RecountQueuesRequest) (*raftqv1.RecountQueuesResponse, error) {
	if n := len(req.GetQueues()); n > maxRecountQueues {
		return nil, invalid("%d queues; at most %d a request", n, maxRecountQueues)
	}
	for _, q := range req.GetQueues() {
		if q == "" {
			return nil, invalid("a queue name is empty")
		}
	}
	c.s.log.Warn("counter audit: a node found queues whose counters disagree with their messages; recounting them on every replica",
		"reported_by", req.GetReportedBy(), "queues", req.GetQueues())
	res, err := c.s.legacy.ops.RecountQueues(ctx, req.GetQueues())
	if errors.Is(err, broker.ErrRecountUnsupported) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, err
	}
	c.s.log.Info("counter audit: recount committed", "queues", req.GetQueues(), "repaired_here", len(res.Repairs), "byte_total_repaired_here", res.TotalBytesRepaired)
	return &raftqv1.RecountQueuesResponse{}, nil
}
