package cluster

import (
	"slices"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
)

// SetDiskLow publishes in gossip whether this node's data dir is short of
// free space, so that the leader can refuse writes a quorum could not
// store. The cluster package does not measure disks; its caller does.
func (n *Node) SetDiskLow(low bool) { n.ms.SetDiskLow(low) }

// VoterDisks is what the current configuration's voters advertise about
// their disks.
type VoterDisks struct {
	Voters int
	// Low lists the voters (this node included) whose metadata says their
	// disk is low, sorted. A voter whose metadata is unknown is not
	// listed.
	Low []string
}

// CanStore reports whether a quorum of voters has room for new entries
// (true when the configuration is not known: no information, no refusal).
func (v VoterDisks) CanStore() bool { return v.Voters == 0 || v.Voters-len(v.Low) >= v.Voters/2+1 }

// VoterDisks returns the voters' advertised disk state.
func (n *Node) VoterDisks() VoterDisks { return voterDisks(n.r, n.ms) }

// voterDisks is VoterDisks of r's configuration, from ms's records.
func voterDisks(r groupRaft, ms *membership.Membership) VoterDisks {
	var v VoterDisks
	servers, err := raftgroup.LatestServers(r)
	if err != nil {
		return v
	}
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		v.Voters++
		if meta, ok := ms.MetaOf(string(s.ID)); ok && meta.DiskLow {
			v.Low = append(v.Low, string(s.ID))
		}
	}
	slices.Sort(v.Low)
	return v
}
