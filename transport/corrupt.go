package transport

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/raftq/raftq/cluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// repairAskInterval is how often a node whose Raft state is corrupt asks
// for its repair until the leader has removed it.
const repairAskInterval = 2 * time.Second

// corruptLoop follows this node's own corruption (cluster.Node.Corrupt).
// Found while the node runs, Raft here has already stopped (the read that
// found it stopped it): the node starts again, into quarantine. Found at
// start (quarantined), the node asks the leader, through any peer, to
// remove it; once out of the configuration it sets its Raft state aside
// and starts again with none, as a diverged replica does, and rejoins
// with the leader's snapshot and log (cluster/DESIGN.md, "Corrupt state").
func (s *Server) corruptLoop(ctx context.Context) {
	defer close(s.corruptDone)
	select {
	case <-ctx.Done():
		return
	case <-s.node.CorruptFound():
	}
	c := s.node.Corrupt()
	if !s.node.Quarantined() {
		s.log.Error("this node found its Raft state corrupt while running: restarting to stay out of Raft until it is repaired from its peers", "corruption", c.Error())
		s.restartOnce.Do(func() { close(s.restart) })
		return
	}
	t := time.NewTicker(repairAskInterval)
	defer t.Stop()
	lastSaid := ""
	for {
		removed, why := s.askRepair(ctx, c)
		if removed {
			reason := "corrupt Raft state (" + c.Error() + "); removed for repair"
			if err := cluster.RequestWipe(s.b.DataDir(), reason); err != nil {
				s.log.Error("removed for repair, but could not ask for the Raft state to be set aside; the next try repeats it", "err", err)
			} else {
				s.log.Warn("removed for repair: restarting with the corrupt Raft state set aside, to rejoin with the leader's")
				s.restartOnce.Do(func() { close(s.restart) })
				return
			}
		} else if why != lastSaid {
			s.log.Error("this node's Raft state is corrupt and it is not repaired yet: it serves nothing and votes in nothing", "waiting_for", why, "corruption", c.Error())
			lastSaid = why
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// askRepair asks the peers, in turn, for this node's removal (each
// forwards it to the leader) until one answers.
func (s *Server) askRepair(ctx context.Context, c *cluster.Corruption) (removed bool, why string) {
	req := &raftqv1.RepairCorruptRequest{NodeId: s.b.ID(), Reason: c.Error()}
	why = "no peer reachable"
	for _, m := range s.node.Members() {
		if m.ID == s.b.ID() || !m.Alive || m.GRPCAddr == "" {
			continue
		}
		conn, err := s.peers.Get(m.ID, m.GRPCAddr)
		if err != nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
		resp, err := raftqv1.NewClusterClient(conn).RepairCorrupt(actx, req)
		cancel()
		if err != nil {
			why = fmt.Sprintf("asking %s: %v", m.ID, status.Convert(err).Message())
			continue
		}
		if resp.GetRemoved() {
			return true, ""
		}
		return false, "the leader deferred the repair: " + resp.GetDeferred()
	}
	return false, why
}

// RepairCorrupt is a node whose Raft state is corrupt asking this leader
// (the interceptor forwards it here) to remove it, so that it can be
// rebuilt. Removal follows the replica repair's quorum rule
// (repairAllowed): the voters left that are healthy must be a majority
// of the voters left, and one voter at a time. With a majority corrupt
// nothing is removed, and the cluster, without a quorum, serves nothing.
func (c *clusterService) RepairCorrupt(ctx context.Context, req *raftqv1.RepairCorruptRequest) (*raftqv1.RepairCorruptResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, invalid("node_id is required")
	}
	s := c.s
	if id == s.b.ID() {
		return nil, status.Error(codes.FailedPrecondition, "a leader does not remove itself: a node with corrupt state takes no part in Raft, so it cannot lead")
	}
	nodes := s.node.Status().Nodes
	var bad *cluster.NodeStatus
	voters, healthy := 0, 0
	var back []string
	for i, n := range nodes {
		switch n.Suffrage {
		case "voter":
			voters++
		case "nonvoter":
			if n.ID != id {
				back = append(back, n.ID+" (catching up as a nonvoter)")
			}
		}
		if n.ID == id {
			bad = &nodes[i]
		} else if n.Suffrage == "voter" && n.Healthy {
			healthy++
		}
	}
	if bad == nil {
		return &raftqv1.RepairCorruptResponse{Removed: true}, nil
	}
	s.repairsMu.Lock()
	defer s.repairsMu.Unlock()
	for rid, since := range s.repairs {
		switch {
		case slices.ContainsFunc(nodes, func(n cluster.NodeStatus) bool { return n.ID == rid }):
			delete(s.repairs, rid) // back in the configuration
		case time.Since(since) > repairRejoinWait:
			delete(s.repairs, rid)
		default:
			back = append(back, rid+" (removed for repair, not rejoined yet)")
		}
	}
	slices.Sort(back)
	if ok, why := repairAllowed(voters, healthy, bad.Suffrage == "voter", back); !ok {
		s.log.Warn("corrupt node repair deferred: "+why, "node", id, "voters", voters, "healthy_voters", healthy, "not_back", back, "corruption", req.GetReason())
		return &raftqv1.RepairCorruptResponse{Deferred: why}, nil
	}
	s.log.Warn("corrupt node repair: removing the node so that it rejoins with the leader's state", "node", id, "voters", voters, "healthy_voters", healthy, "corruption", req.GetReason())
	// force: the node is coming back, so the --bootstrap-expect floor
	// does not apply; quorum was checked.
	if err := s.node.RemoveNode(ctx, id, true); err != nil {
		return nil, toStatus(err)
	}
	s.repairs[id] = time.Now()
	s.corruptRepairs.Inc()
	return &raftqv1.RepairCorruptResponse{Removed: true}, nil
}

// corruptStateError is the answer to a read on a node whose Raft state is
// corrupt, nil on any other.
func (s *Server) corruptStateError() error {
	c := s.node.Corrupt()
	if c == nil {
		return nil
	}
	return status.Error(codes.Unavailable, "this node's Raft state is corrupt ("+c.Error()+"): it serves nothing until it is repaired from its peers; ask another node")
}
