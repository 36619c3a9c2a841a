package cluster

import (
	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
)

// VoterVersions is what the current Raft configuration's servers advertise
// about the log versions they can apply. Nonvoters count too: they apply
// the same log, and each is about to become a voter.
type VoterVersions struct {
	// Min is the lowest LogVersion advertised by a server whose metadata is
	// known (a voter that advertises none counts as 1); 0 if none is known.
	Min uint32
	// Complete is true when every server's metadata is known, so Min covers
	// them all. Only then may the leader raise the cluster's version to
	// Min.
	Complete bool
	// MinMaxQueuedBytes is the smallest max_queued_bytes proposal a voter
	// advertises (Config.MaxQueuedBytes); 0 if none advertises one.
	MinMaxQueuedBytes int64
	// Voters is the number of voters in the configuration.
	Voters int
	// Changed is closed when gossip membership or metadata, or the
	// leader's set of peers, may have changed: read VoterVersions again.
	Changed <-chan struct{}
}

// VoterVersions returns the log versions advertised by the servers
// (voters and nonvoters) of the latest Raft configuration. A server's
// version is the one in its last gossip metadata, even if it has failed
// since: a node that restarts re-advertises its own, and Changed fires
// then.
func (n *Node) VoterVersions() VoterVersions { return voterVersions(n.r, n.ms) }

// voterVersions is VoterVersions of r's configuration, from ms's records.
func voterVersions(r groupRaft, ms *membership.Membership) VoterVersions {
	// Taken first, so that no change after the read is missed.
	v := VoterVersions{Changed: ms.Changes()}
	servers, err := raftgroup.LatestServers(r)
	if err != nil {
		return v
	}
	v.Complete = true
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			v.Voters++
		}
		meta, ok := ms.MetaOf(string(s.ID))
		if !ok {
			v.Complete = false
			continue
		}
		if lv := meta.EffectiveLogVersion(); v.Min == 0 || lv < v.Min {
			v.Min = lv
		}
		if mq := meta.MaxQueuedBytes; mq > 0 && (v.MinMaxQueuedBytes == 0 || mq < v.MinMaxQueuedBytes) {
			v.MinMaxQueuedBytes = mq
		}
	}
	if v.Voters == 0 {
		v.Complete = false
	}
	return v
}
