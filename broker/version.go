package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// versionRaiser raises the cluster version, a leader duty (leader.go):
// its own type, given at construction what it reads (the voters'
// advertised versions, the replicated cluster version) and the group's
// proposer, so the group's type keeps none of its steps.
type versionRaiser struct {
	log    *slog.Logger
	reads  fsm.Reader
	voters func() cluster.VoterVersions // the node's gossip of its voters
	// servers is the group's latest Raft configuration, from which the
	// raise to the handover chooses the meta group's founders.
	servers func() ([]raft.Server, error)
	propose func(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error)
}

// run runs for each established term. The cluster version
// (the log version entries are proposed under) rises to the newest version
// every voter advertises, and never past what this build applies: a
// command or apply rule added in version N is not used until every voter
// runs a build that applies N, so during a rolling upgrade old and new
// nodes apply every entry alike. It waits on membership changes, not a
// timer; a failed proposal is retried after a back-off.
func (r *versionRaiser) run(ctx context.Context, _ uint64) {
	backoff := 100 * time.Millisecond
	for {
		vv := r.voters()
		wait := vv.Changed
		if target, ok := nextClusterVersion(vv, r.reads.ClusterVersion()); ok {
			err := r.raise(ctx, target, vv.MinMaxQueuedBytes)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				r.log.Warn("could not raise the cluster version; retrying", "to", target, "err", err, "retry_in", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			r.log.Info("cluster version raised: every voter applies it", "cluster_version", target, "voters", vv.Voters)
			backoff = 100 * time.Millisecond
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		}
	}
}

// raise proposes SetClusterVersion in an entry of the
// version it introduces, the one entry whose version is ahead of the
// cluster's. The entry that makes max_queued_bytes a cluster setting
// (fsm.AdmitVersion) starts it at maxQueued, the smallest voter's
// proposal (each node's --max-queued-bytes, by default a quarter of its
// memory limit), so no voter is asked to hold more than its own share.
func (r *versionRaiser) raise(ctx context.Context, v uint32, maxQueued int64) error {
	set := &fsmv1.SetClusterVersion{Version: v}
	if v >= fsm.AdmitVersion && r.reads.ClusterVersion() < fsm.AdmitVersion {
		set.MaxQueuedBytes = max(maxQueued, 0)
	}
	if v >= fsm.HandoverVersion && r.reads.ClusterVersion() < fsm.HandoverVersion {
		servers, err := r.servers()
		if err != nil {
			return err
		}
		set.MetaFounders = metaFounders(servers)
	}
	cmd := &fsmv1.Command{
		Version: v,
		Op:      &fsmv1.Command_SetClusterVersion{SetClusterVersion: set},
	}
	_, err := fsm.As[*fsm.Done](r.propose(ctx, cmd))
	return err
}

// metaFounders chooses the meta group's first voters among the group's
// voters (meta.MetaVoters: 3, or 5 from 5 nodes), with the Raft address
// each shares with this group (one Raft port per node).
func metaFounders(servers []raft.Server) []*fsmv1.MetaServer {
	var members []meta.Member
	addr := map[string]string{}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			members = append(members, meta.Member{NodeID: string(s.ID), RaftAddr: string(s.Address)})
			addr[string(s.ID)] = string(s.Address)
		}
	}
	var out []*fsmv1.MetaServer
	for _, id := range meta.MetaVoters(nil, members, 0) {
		out = append(out, &fsmv1.MetaServer{Id: id, Address: addr[id]})
	}
	return out
}

// nextClusterVersion is the version the cluster may rise to: the lowest
// any voter applies, capped by this build, once every voter is known.
func nextClusterVersion(vv cluster.VoterVersions, current uint32) (uint32, bool) {
	target := min(vv.Min, fsm.MaxLogVersion)
	return target, vv.Complete && target > current
}

// versionGate refuses what the replicated cluster version does not apply
// yet (not every voter runs a build of that log version), before
// anything is proposed: an older voter would ignore the field or
// command, or apply it by older rules, and so differ from the leader.
// One job, kept off Broker: every part that proposes asks it.
type versionGate struct{ reads fsm.Reader }

// need refuses what needs log version v on a cluster below it,
// naming v and what needs it (what: the field or behaviour).
func (g versionGate) need(v uint32, what string) error {
	if cv := g.reads.ClusterVersion(); cv < v {
		return &NeedsVersionError{Field: what, Needs: v, Cluster: cv}
	}
	return nil
}
