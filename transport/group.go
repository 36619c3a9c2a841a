package transport

import (
	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// groupNamer is a request that names the Raft group it is about: the
// operator calls that describe one log (Status, Snapshot, Verify,
// Checkpoint, LocalDigest, ReportDivergence, TransferLeadership, Backup).
// A node runs one data group today; the field exists so that the issue
// that adds more groups changes no message.
type groupNamer interface{ GetGroup() string }

// checkGroup answers whether req names a group this node runs: no group
// (as before the field existed) or the data group's id. Anything else is
// NOT_FOUND, before the call is routed or forwarded, so it changes
// nothing anywhere.
func checkGroup(req any) error {
	g, ok := req.(groupNamer)
	if !ok {
		return nil
	}
	if _, ok := req.(*raftqv1.CreateQueueRequest); ok {
		// Where to place a new queue, not the log a call describes
		// (createTarget).
		return nil
	}
	switch name := g.GetGroup(); name {
	case "", broker.GroupID:
		return nil
	default:
		return status.Errorf(codes.NotFound, "group %q: this cluster runs one data group, %q (and TransferLeadership and Backup also take the meta group, %q, from log version 21)", name, broker.GroupID, meta.MetaGroupID)
	}
}

// placedStatus answers a local-only Status that names a data group the
// meta group placed on this node (Config.Groups) from that group alone:
// its leader, term, indexes and servers as this node sees them. It is
// what a placed group's leader asks a nonvoter before promoting it
// (peers.Pool.GroupProgress). ok false: not such a call.
func (s *Server) placedStatus(req any) (*raftqv1.StatusResponse, bool) {
	r, isStatus := req.(*raftqv1.StatusRequest)
	if !isStatus || !r.GetLocalOnly() || s.cfg.Groups == nil {
		return nil, false
	}
	name := r.GetGroup()
	if name == "" || name == broker.GroupID || name == meta.MetaGroupID {
		return nil, false
	}
	b, ok := s.cfg.Groups(name)
	if !ok {
		return nil, false
	}
	st := b.Runtime().Status()
	out := &raftqv1.StatusResponse{
		LeaderId: st.LeaderID, LeaderAddr: st.LeaderAddr, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex,
		ClusterVersion: b.State().Reader().ClusterVersion(), ClusterId: st.ClusterID,
	}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, &raftqv1.Node{Id: n.ID, GrpcAddr: n.ClientGRPCAddr, PeerGrpcAddr: n.GRPCAddr, RaftAddr: n.RaftAddr,
			Suffrage: n.Suffrage, State: n.State, Healthy: n.Healthy, AppliedIndex: n.AppliedIndex})
	}
	return out, true
}
