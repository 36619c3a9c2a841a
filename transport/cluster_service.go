package transport

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/metagroup"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterService serves the operator API. Status and Verify answer from
// this node's view; RemoveNode, TransferLeadership and Checkpoint are
// forwarded to the leader by the interceptor.
type clusterService struct {
	raftqv1.UnimplementedClusterServer
	s *Server
}

// peerStatusTimeout bounds asking another node for its applied index: a
// slow or unreachable node keeps 0 rather than delaying the answer.
const peerStatusTimeout = time.Second

func (c *clusterService) Status(ctx context.Context, req *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	st := c.s.legacy.node.Status()
	out := &raftqv1.StatusResponse{
		LeaderId: st.LeaderID, LeaderAddr: st.LeaderAddr, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex,
		ClusterVersion: c.s.legacy.state.ClusterVersion(),
		ClusterId:      st.ClusterID,
	}
	for _, r := range st.Refused {
		out.RefusedMembers = append(out.RefusedMembers, &raftqv1.RefusedMember{Id: r.ID, GossipAddr: r.GossipAddr, ClusterId: r.ClusterID, Reason: r.Reason})
	}
	held, settings := c.s.legacy.state.Held()
	out.HeldBytes = held
	if out.ClusterVersion >= fsm.AdmitVersion {
		out.Settings = &raftqv1.ClusterSettings{MaxQueuedBytes: settings.MaxQueuedBytes, MaxQueues: settings.MaxQueues}
	}
	out.Meta = c.s.metaStatus()
	if c.s.cfg.Meta != nil && c.s.cfg.Meta.FSM().Seeded() {
		// The settings as the meta group holds them (the data group
		// follows them a moment later).
		out.Settings = metaSettings(c.s.cfg.Meta.FSM().Settings())
	}
	for _, n := range st.Nodes {
		node := &raftqv1.Node{
			Id: n.ID, GrpcAddr: n.ClientGRPCAddr, PeerGrpcAddr: n.GRPCAddr, RaftAddr: n.RaftAddr, HttpAddr: n.HTTPAddr,
			Suffrage: n.Suffrage, State: n.State, Healthy: n.Healthy,
			LastContactMs: n.LastContactMs, AppliedIndex: n.AppliedIndex,
			MaxLogVersion: n.LogVersion, Version: n.Version, DiskLow: n.DiskLow,
			Zone: n.Zone,
		}
		if n.Corrupt {
			node.Corrupt = cmp.Or(n.CorruptReason, "corrupt")
		}
		if n.ID == c.s.legacy.b.ID() {
			r := c.s.resources()
			node.ResidentMemoryBytes, node.DataDirFreeBytes = r.ResidentBytes, r.DiskFreeBytes
			if !r.Started.IsZero() {
				node.StartedAtMs = r.Started.UnixMilli()
			}
		}
		out.Nodes = append(out.Nodes, node)
	}
	if !req.GetLocalOnly() {
		c.peerApplied(ctx, out.Nodes)
	}
	return out, nil
}

// peerApplied fills in other nodes' applied index, memory, disk and
// start time, which only each node knows of itself, by asking them (local_only, so they do not ask on) at
// the address peers use.
func (c *clusterService) peerApplied(ctx context.Context, nodes []*raftqv1.Node) {
	ctx, cancel := context.WithTimeout(ctx, peerStatusTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n.Id == c.s.legacy.b.ID() || n.PeerGrpcAddr == "" || n.State == "unreachable" {
			continue
		}
		conn, err := c.s.peers.Get(n.Id, n.PeerGrpcAddr)
		if err != nil {
			continue
		}
		wg.Go(func() {
			st, err := raftqv1.NewClusterClient(conn).Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
			if err != nil {
				return
			}
			n.AppliedIndex = st.GetAppliedIndex()
			for _, self := range st.GetNodes() {
				if self.GetId() == n.Id { // what it reports of itself
					n.ResidentMemoryBytes, n.DataDirFreeBytes, n.StartedAtMs = self.GetResidentMemoryBytes(), self.GetDataDirFreeBytes(), self.GetStartedAtMs()
				}
			}
		})
	}
	wg.Wait()
}

func (c *clusterService) RemoveNode(ctx context.Context, req *raftqv1.RemoveNodeRequest) (*raftqv1.RemoveNodeResponse, error) {
	if req.GetId() == "" {
		return nil, invalid("id is required")
	}
	if err := c.s.legacy.node.RemoveNode(ctx, req.Id, req.Force); err != nil {
		return nil, err
	}
	return &raftqv1.RemoveNodeResponse{}, nil
}

// Leave takes this node out of the cluster, then tells the process to
// stop (Server.Left). A refusal (below bootstrap-expect without force)
// changes nothing and the node keeps running; once the leave has been
// announced in gossip the node stops even if its removal was not seen in
// time (the leader removes a left member as soon as it hears of it).
func (c *clusterService) Leave(ctx context.Context, req *raftqv1.LeaveRequest) (*raftqv1.LeaveResponse, error) {
	err := c.s.legacy.b.Leave(ctx, req.GetForce())
	if errors.Is(err, cluster.ErrBelowExpect) {
		return nil, err
	}
	c.s.leftOnce.Do(func() { close(c.s.left) })
	if err != nil {
		return nil, err
	}
	return &raftqv1.LeaveResponse{Id: c.s.legacy.b.ID()}, nil
}

// SetClusterSettings changes the replicated cluster settings (the
// interceptor forwards it to the leader).
func (c *clusterService) SetClusterSettings(ctx context.Context, req *raftqv1.SetClusterSettingsRequest) (*raftqv1.SetClusterSettingsResponse, error) {
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if c.s.metaActive() {
		ms, err := c.s.cfg.Meta.SetSettings(ctx, metagroup.SettingsChange{MaxQueuedBytes: req.MaxQueuedBytes, MaxQueues: req.MaxQueues,
			Groups: req.Groups, Replicas: req.Replicas, IdempotencyKey: req.GetIdempotencyKey()})
		if err == nil {
			err = c.s.awaitDataSettings(ctx)
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return &raftqv1.SetClusterSettingsResponse{Settings: metaSettings(ms)}, nil
	}
	if req.Groups != nil || req.Replicas != nil {
		// Only the meta group keeps data groups; the data log has no
		// such setting to hold them.
		return nil, status.Error(codes.FailedPrecondition, "groups and replicas are kept by the meta group, which the cluster has not handed over to yet (every voter at log version 21): retry once it has")
	}
	s, err := c.s.legacy.ops.SetClusterSettings(ctx, broker.SettingsChange{MaxQueuedBytes: req.MaxQueuedBytes, MaxQueues: req.MaxQueues, IdempotencyKey: req.GetIdempotencyKey()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &raftqv1.SetClusterSettingsResponse{Settings: &raftqv1.ClusterSettings{MaxQueuedBytes: s.MaxQueuedBytes, MaxQueues: s.MaxQueues}}, nil
}

func (c *clusterService) TransferLeadership(ctx context.Context, req *raftqv1.TransferLeadershipRequest) (*raftqv1.TransferLeadershipResponse, error) {
	g := c.s.legacy.raft
	if isMetaTransfer(req) {
		g = c.s.cfg.Meta.Raft()
	}
	id, err := g.TransferLeadership(ctx, req.GetToId())
	if err != nil {
		return nil, err
	}
	return &raftqv1.TransferLeadershipResponse{NewLeaderId: id}, nil
}

func (c *clusterService) Snapshot(ctx context.Context, _ *raftqv1.SnapshotRequest) (*raftqv1.SnapshotResponse, error) {
	idx, err := c.s.legacy.raft.Snapshot(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &raftqv1.SnapshotResponse{Index: idx}, nil
}

func (c *clusterService) Checkpoint(ctx context.Context, _ *raftqv1.CheckpointRequest) (*raftqv1.CheckpointResponse, error) {
	idx, err := c.s.legacy.ops.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	return &raftqv1.CheckpointResponse{Index: idx}, nil
}

// LocalDigest reports this node's digest at a checkpoint index, waiting
// (within the deadline) for the node to apply it.
func (c *clusterService) LocalDigest(ctx context.Context, req *raftqv1.LocalDigestRequest) (*raftqv1.NodeDigest, error) {
	out := &raftqv1.NodeDigest{Id: c.s.legacy.b.ID()}
	d, err := c.digestAt(ctx, req.Index)
	if err != nil {
		return nil, err
	}
	out.AppliedIndex = req.Index
	out.Digest = d
	// Verify recomputes every counter from the structures: run it once.
	if err := c.s.legacy.checks.Verify(); err != nil {
		out.Error = err.Error()
	} else {
		out.CountersOk = true
	}
	return out, nil
}

// Verify appends a checkpoint through the leader, then asks every known
// node for its digest at that index. Unreachable nodes are listed with an
// empty digest and their error; see judgeDigests for what consistent means.
func (c *clusterService) Verify(ctx context.Context, _ *raftqv1.VerifyRequest) (*raftqv1.VerifyResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	var idx uint64
	route, err := c.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if route.Local {
		cp, err := c.Checkpoint(ctx, &raftqv1.CheckpointRequest{})
		if err != nil {
			return nil, toStatus(err)
		}
		idx = cp.Index
	} else {
		conn, err := c.s.peers.Get(route.LeaderID, route.LeaderAddr)
		if err != nil {
			return nil, toStatus(err)
		}
		cp, err := raftqv1.NewClusterClient(conn).Checkpoint(ctx, &raftqv1.CheckpointRequest{})
		if err != nil {
			return nil, err
		}
		idx = cp.Index
	}
	out := &raftqv1.VerifyResponse{}
	voters := map[string]bool{}
	for _, n := range c.s.legacy.node.Status().Nodes {
		if n.Suffrage == "voter" {
			voters[n.ID] = true
		}
		var nd *raftqv1.NodeDigest
		var err error
		if n.ID == c.s.legacy.b.ID() {
			nd, err = c.LocalDigest(ctx, &raftqv1.LocalDigestRequest{Index: idx})
		} else if n.GRPCAddr == "" {
			err = errors.New("address unknown")
		} else if conn, cerr := c.s.peers.Get(n.ID, n.GRPCAddr); cerr != nil {
			err = cerr
		} else {
			nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			nd, err = raftqv1.NewClusterClient(conn).LocalDigest(nctx, &raftqv1.LocalDigestRequest{Index: idx})
			cancel()
		}
		if err != nil {
			// No answer: an empty digest and the error.
			nd = &raftqv1.NodeDigest{Id: n.ID, Error: err.Error()}
		}
		nd.Id = n.ID
		out.Nodes = append(out.Nodes, nd)
	}
	out.Consistent, out.InconsistentIds = judgeDigests(out.Nodes, voters, route.LeaderID)
	return out, nil
}

// judgeDigests decides whether the replicas agree. They do when every
// voter answered (a voter that cannot be asked may hold anything) and
// every node that answered reported the same digest with its counters
// consistent. Otherwise it names the nodes at fault: the voters without
// an answer, and the nodes whose counters fail or whose digest differs
// from the one most nodes reported (on a tie, the leader's, so one node
// of two that differs is not blamed for the leader's state).
func judgeDigests(nodes []*raftqv1.NodeDigest, voters map[string]bool, leader string) (bool, []string) {
	answered := func(nd *raftqv1.NodeDigest) bool { return nd.Digest != "" }
	count := map[string]int{}
	leaderDigest := ""
	for _, nd := range nodes {
		if answered(nd) {
			count[nd.Digest]++
			if nd.Id == leader {
				leaderDigest = nd.Digest
			}
		}
	}
	ref := leaderDigest
	for _, nd := range nodes { // in node order: deterministic on ties
		if answered(nd) && count[nd.Digest] > count[ref] {
			ref = nd.Digest
		}
	}
	var bad []string
	for _, nd := range nodes {
		switch {
		case !answered(nd):
			if voters[nd.Id] {
				bad = append(bad, nd.Id)
			}
		case !nd.CountersOk || nd.Digest != ref:
			bad = append(bad, nd.Id)
		}
	}
	return len(bad) == 0 && len(count) > 0, bad
}

// digestAt is this node's state digest at a checkpoint index, once the
// node has applied it (waiting within ctx's deadline).
func (c *clusterService) digestAt(ctx context.Context, index uint64) (string, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for c.s.legacy.state.AppliedIndex() < index {
		select {
		case <-ctx.Done():
			return "", status.Errorf(codes.DeadlineExceeded, "index %d not applied here (at %d)", index, c.s.legacy.state.AppliedIndex())
		case <-t.C:
		}
	}
	d, err := c.s.legacy.checks.DigestAt(index)
	if err != nil {
		if errors.Is(err, fsm.ErrNoCheckpoint) {
			return "", status.Error(codes.FailedPrecondition, err.Error())
		}
		return "", err
	}
	return d, nil
}

// metaSettings are the meta group's settings as the API shows them:
// groups and replicas in force (the defaults for 0; a group never has
// more replicas than there are nodes).
func metaSettings(ms meta.Settings) *raftqv1.ClusterSettings {
	return &raftqv1.ClusterSettings{MaxQueuedBytes: ms.MaxQueuedBytes, MaxQueues: ms.MaxQueues,
		Groups: uint32(meta.GroupCount(ms.Groups)), Replicas: cmp.Or(ms.Replicas, meta.DefaultReplicas)}
}
