package membership

import (
	"strings"
	"time"
)

// Meta is a node's memberlist metadata (JSON, at most
// memberlist.MetaMaxSize bytes).
type Meta struct {
	ID   string `json:"id"`
	Raft string `json:"raft"`
	GRPC string `json:"grpc,omitempty"`
	// Client: where clients reach the node's gRPC API, when that is not
	// GRPC (a published port); builds before it omit it.
	Client string `json:"client,omitempty"`
	HTTP   string `json:"http,omitempty"`
	Expect int    `json:"expect"`
	// State: the node has Raft state (bootstrapped, or replicated to), so
	// nobody that sees it may bootstrap a new cluster.
	State bool `json:"state,omitempty"`
	// Leaving: the node is shutting down gracefully; its coming departure
	// is a leave, not a failure.
	Leaving bool `json:"leaving,omitempty"`
	// LogVersion: the newest log version the node can apply. Builds before
	// it was advertised omit it; they count as version 1.
	LogVersion uint32 `json:"log_version,omitempty"`
	// MaxQueuedBytes: the node's proposal for the cluster's
	// max_queued_bytes (Config.MaxQueuedBytes); builds before it omit it.
	MaxQueuedBytes int64 `json:"max_queued_bytes,omitempty"`
	// Version: the node's build (Config.Version); builds before it was
	// advertised omit it.
	Version string `json:"version,omitempty"`
	// DiskLow: the node's data dir has less free space than it keeps
	// free, so it may soon fail to store log entries (Node.SetDiskLow).
	// Builds before it omit it.
	DiskLow bool `json:"disk_low,omitempty"`
	// Corrupt: the node found its Raft state corrupt; it takes no part
	// in Raft until it is removed and rebuilt (Node.Corrupt).
	Corrupt bool `json:"corrupt,omitempty"`
	// ClusterID: the id of the cluster the node belongs to, or (a node
	// without Raft state) the one it asks to join; empty if it has none
	// (see DESIGN.md, "Cluster identity").
	ClusterID string `json:"cluster_id,omitempty"`
	// IDs: the node's build has cluster ids (it presents one when it has
	// one, and admits only members that present its own). Builds before
	// them omit it.
	IDs bool `json:"ids,omitempty"`
	// Run: random, new for every start of the process. A node restarted
	// faster than gossip notices it gone is never a gossip join; a new
	// Run tells the others it is a new process (membership.update).
	// Builds before it omit it.
	Run string `json:"run,omitempty"`
	// Mux: the node's Raft port is a multiplexer (raftmux) that takes a
	// preamble naming the group; a connection without one still reaches
	// its data group. Builds before it omit it, and drop a connection
	// that opens with a preamble, so none is sent to them.
	Mux bool `json:"mux,omitempty"`
	// Zone: the failure domain the node declares (--zone; CheckZone),
	// carried for placing group replicas across zones (issue 22). ""
	// when it declares none; builds before it omit it, and read as "".
	Zone string `json:"zone,omitempty"`
	// Leads: the ids of the data groups the node leads (issue 22),
	// sorted and comma-separated (a group id has no comma: a string
	// keeps Meta comparable and is shorter than a JSON list), so any
	// node finds a group's leader without a replica of it
	// (Membership.GroupLeader). Only what fits memberlist's limit beside
	// the rest is advertised (SetLeads). Builds before it omit it.
	Leads string `json:"leads,omitempty"`
}

// LeadGroups is Leads as a list.
func (m Meta) LeadGroups() []string {
	if m.Leads == "" {
		return nil
	}
	return strings.Split(m.Leads, ",")
}

// ClientGRPC is where clients reach the node: Client, else GRPC.
func (m Meta) ClientGRPC() string {
	if m.Client != "" {
		return m.Client
	}
	return m.GRPC
}

// EffectiveLogVersion is the advertised log version, 1 if none is.
func (m Meta) EffectiveLogVersion() uint32 { return max(m.LogVersion, 1) }

// MemberState is a member's gossip state as this node last heard it.
type MemberState int

// Member states.
const (
	Alive MemberState = iota
	Failed
	Left
)

func (s MemberState) String() string {
	switch s {
	case Alive:
		return "alive"
	case Failed:
		return "failed"
	default:
		return "left"
	}
}

// Record is the node's record of one gossip member. Records of failed and
// left members are kept (the reconciler needs their history).
type Record struct {
	// Meta is its last metadata; MetaOK: it is known (readable).
	Meta       Meta
	MetaOK     bool
	GossipAddr string
	State      MemberState
	Since      time.Time // of the last state change
	Leaving    bool      // announced a graceful leave
	// NoAdd: removed from Raft by an operator while alive; the reconciler
	// does not re-add it until it rejoins gossip.
	NoAdd bool
}

// Member is one gossip member as this node sees it.
type Member struct {
	ID       string
	GRPCAddr string
	// ClientGRPCAddr is where clients reach it (GRPCAddr unless it
	// advertises another).
	ClientGRPCAddr string
	RaftAddr       string
	HTTPAddr       string
	GossipAddr     string
	Alive          bool
	// State is "alive", "failed" or "left".
	State string
	// LogVersion is the newest log version the member advertises (1 for a
	// build that advertises none; 0 while its metadata is unknown).
	LogVersion uint32
}
