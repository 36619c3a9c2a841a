package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/broker"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftlog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/raftgroup"
)

// repairAskInterval is how often a node whose Raft state is corrupt asks
// for its repair until the leader has removed it.
const repairAskInterval = 2 * time.Second

// corruptLoop follows this node's own corruption (raftgroup.Group.Corrupt).
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
	case <-s.legacy.raft.CorruptFound():
	}
	c := s.legacy.raft.Corrupt()
	if !s.legacy.raft.Quarantined() {
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
			if err := raftgroup.RequestWipe(s.legacy.b.DataDir(), reason); err != nil {
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
func (s *Server) askRepair(ctx context.Context, c *raftlog.Corruption) (removed bool, why string) {
	req := &raftqv1.RepairCorruptRequest{NodeId: s.legacy.b.ID(), Reason: c.Error()}
	why = "no peer reachable"
	for _, m := range s.legacy.node.Members() {
		if m.ID == s.legacy.b.ID() || !m.Alive || m.GRPCAddr == "" {
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
// rebuilt: the data group decides under the replica repair's quorum rule
// (broker.Operator.RemoveCorrupt).
func (c *clusterService) RepairCorrupt(ctx context.Context, req *raftqv1.RepairCorruptRequest) (*raftqv1.RepairCorruptResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, invalid("node_id is required")
	}
	s := c.s
	deferred, err := s.legacy.ops.RemoveCorrupt(ctx, id, req.GetReason())
	if errors.Is(err, broker.ErrSelfCorrupt) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if deferred != "" {
		return &raftqv1.RepairCorruptResponse{Deferred: deferred}, nil
	}
	return &raftqv1.RepairCorruptResponse{Removed: true}, nil
}

// corruptStateError is the answer to a read on a node whose Raft state is
// corrupt, nil on any other.
func (s *Server) corruptStateError() error {
	c := s.legacy.raft.Corrupt()
	if c == nil {
		return nil
	}
	return status.Error(codes.Unavailable, "this node's Raft state is corrupt ("+c.Error()+"): it serves nothing until it is repaired from its peers; ask another node")
}
