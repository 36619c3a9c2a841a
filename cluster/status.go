package cluster

import (
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
)

// Status is one node's view of the cluster, shaped like
// raftq.v1.StatusResponse.
type Status struct {
	LeaderID     string
	LeaderAddr   string // the leader's gRPC address for clients
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	Nodes        []NodeStatus
	// ClusterID is the id of the cluster this node belongs to ("" until
	// it has one).
	ClusterID string
	// Refused are live gossip members outside the configuration that
	// this node does not admit (for their cluster id), with why.
	Refused []RefusedMember
}

// NodeStatus describes one server of the Raft configuration.
type NodeStatus struct {
	ID string
	// GRPCAddr is where peers reach the node's API; ClientGRPCAddr where
	// clients do (its advertised client address, else GRPCAddr).
	GRPCAddr       string
	ClientGRPCAddr string
	RaftAddr       string
	HTTPAddr       string
	// Suffrage is "voter" or "nonvoter".
	Suffrage string
	// State is "leader", "follower", "candidate" or "unreachable".
	State   string
	Healthy bool
	// LastContactMs: for this node as follower, ms since it last heard
	// from the leader; on the leader, ms since a failing follower last
	// answered; otherwise 0.
	LastContactMs int64
	// AppliedIndex is known only for this node (0 for others).
	AppliedIndex uint64
	// LogVersion is the newest log version the node advertises (1 for a
	// build that advertises none; 0 while its metadata is unknown).
	LogVersion uint32
	// Version is the node's build as it advertises it ("" if unknown).
	Version string
	// Zone is the zone the node declares in gossip ("" for none, or a
	// build from before zones).
	Zone string
	// DiskLow: the node advertises that its data dir is short of free
	// space (SetDiskLow).
	DiskLow bool
	// Corrupt: the node found its Raft state corrupt (it advertises so
	// in gossip); its State is "corrupt". CorruptReason says what and
	// where, for this node only.
	Corrupt       bool
	CorruptReason string
}

// Status returns this node's view of the cluster: the servers of the Raft
// configuration, sorted by id, with gossip metadata and liveness.
func (n *Node) Status() Status {
	st, servers := groupStatus(n.g, n.r, n.ms, n.self())
	st.ClusterID = n.id.get()
	if len(servers) > 0 {
		st.Refused = refused(st.ClusterID, n.cfg.NodeID, n.ms.Records(), servers)
	}
	return st
}

// self is what this node says of itself in Status.
func (n *Node) self() selfView {
	return selfView{ID: n.cfg.NodeID, GRPC: n.cfg.GRPCAdvertise, Client: n.cfg.ClientGRPCAdvertise, HTTP: n.cfg.HTTPAdvertise,
		Raft: n.raftAddr, LogVersion: n.cfg.LogVersion, Version: n.cfg.Version, Zone: n.cfg.Zone}
}

// selfView is what a group's Status says of this node: what it
// advertises, which its own gossip record may not show yet.
type selfView struct {
	ID, GRPC, Client, HTTP, Raft string
	LogVersion                   uint32
	Version, Zone                string
}

// groupStatus is one group's Status as this node sees it (the servers of
// g's latest configuration, with gossip metadata and liveness), and those
// servers; the cluster id and refused members are the node's to add.
func groupStatus(g *raftgroup.Group, r groupRaft, ms *membership.Membership, self selfView) (Status, []raft.Server) {
	leader := g.Leadership()
	rs := g.Stats()
	st := Status{
		LeaderID:     leader.LeaderID,
		LeaderAddr:   leader.LeaderClientAddr,
		Term:         rs.Term,
		CommitIndex:  rs.CommitIndex,
		AppliedIndex: rs.AppliedIndex,
	}
	servers, _ := raftgroup.LatestServers(r) // empty after shutdown
	now := time.Now()
	selfState := rs.State
	hbFailed := rs.FailedHeartbeats
	members := ms.Records()
	for _, s := range servers {
		id := string(s.ID)
		ns := NodeStatus{ID: id, RaftAddr: string(s.Address), Suffrage: "nonvoter"}
		if s.Suffrage == raft.Voter {
			ns.Suffrage = "voter"
		}
		if m, ok := members[id]; ok && m.MetaOK {
			ns.GRPCAddr, ns.ClientGRPCAddr, ns.HTTPAddr, ns.LogVersion = m.Meta.GRPC, m.Meta.ClientGRPC(), m.Meta.HTTP, m.Meta.EffectiveLogVersion()
			ns.Version, ns.DiskLow, ns.Corrupt, ns.Zone = m.Meta.Version, m.Meta.DiskLow, m.Meta.Corrupt, m.Meta.Zone
		}
		switch {
		case id == self.ID:
			ns.GRPCAddr, ns.ClientGRPCAddr, ns.HTTPAddr, ns.LogVersion = self.GRPC, self.Client, self.HTTP, self.LogVersion
			ns.Version, ns.DiskLow, ns.Zone = self.Version, ms.DiskLow(), self.Zone
			ns.AppliedIndex = st.AppliedIndex
			switch selfState {
			case raft.Leader:
				ns.State = "leader"
			case raft.Candidate:
				ns.State = "candidate"
			case raft.Follower:
				ns.State = "follower"
				if lc := rs.LastContact; !lc.IsZero() {
					ns.LastContactMs = now.Sub(lc).Milliseconds()
				}
			default:
				ns.State = "unreachable"
			}
			ns.Healthy = selfState != raft.Shutdown && leader.LeaderID != ""
		default:
			m, known := members[id]
			failedSince, hbFailed := hbFailed[id]
			switch {
			case !known || m.State != membership.Alive || hbFailed:
				ns.State = "unreachable"
			case id == leader.LeaderID:
				ns.State = "leader"
			default:
				ns.State = "follower"
			}
			if hbFailed && !failedSince.IsZero() {
				ns.LastContactMs = now.Sub(failedSince).Milliseconds()
			}
			ns.Healthy = ns.State != "unreachable"
		}
		if ns.Corrupt && ns.State != "unreachable" {
			ns.State, ns.Healthy = "corrupt", false
		}
		st.Nodes = append(st.Nodes, ns)
	}
	if c := g.Corrupt(); c != nil {
		// A quarantined node's Raft has no configuration: it still
		// lists itself, and says why it serves nothing.
		found := false
		for i := range st.Nodes {
			if st.Nodes[i].ID == self.ID {
				found = true
				st.Nodes[i].State, st.Nodes[i].Healthy = "corrupt", false
				st.Nodes[i].Corrupt, st.Nodes[i].CorruptReason = true, c.Error()
			}
		}
		if !found {
			st.Nodes = append(st.Nodes, NodeStatus{ID: self.ID, GRPCAddr: self.GRPC, ClientGRPCAddr: self.Client,
				RaftAddr: self.Raft, HTTPAddr: self.HTTP, State: "corrupt", LogVersion: self.LogVersion, Version: self.Version, Zone: self.Zone,
				Corrupt: true, CorruptReason: c.Error()})
		}
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].ID < st.Nodes[j].ID })
	return st, servers
}

// Members returns this node's gossip view, sorted by id: every member it has
// heard of, including failed and left ones.
func (n *Node) Members() []membership.Member { return n.ms.List() }
