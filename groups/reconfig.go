package groups

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
)

// progressTimeout bounds asking a nonvoter for its applied index.
const progressTimeout = time.Second

// reconfig is a placed group's leader duty (a raftgroup leader service of
// each established term): it keeps the group's Raft configuration in step
// with meta's record of it, one change at a time, each against the
// configuration index it was decided on (nextChange): a replica the
// configuration lacks is added as a nonvoter, a nonvoter is promoted once
// it has caught up, and only then is a server the record no longer names
// removed, never leaving fewer voters than a quorum of the record. A
// leader the record no longer names hands leadership to a voter it names
// (the next leader removes it).
type reconfig struct {
	group, self string
	log         *slog.Logger
	g           *raftgroup.Group
	r           *raft.Raft
	meta        *meta.FSM
	ms          *membership.Membership
	progress    Progress // nil: nonvoters stay nonvoters

	promoteAfter time.Duration
	maxLag       uint64
	interval     time.Duration
}

func (rc *reconfig) run(ctx context.Context) {
	// caughtUp: nonvoters found within maxLag at every check since when.
	caughtUp := map[string]time.Time{}
	for {
		changed, gossip := rc.meta.Changed(), rc.ms.Changes()
		next, err := rc.step(ctx, caughtUp)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, raftgroup.ErrLeadershipLost) || errors.Is(err, raftgroup.ErrShutdown) {
				return // the term ends
			}
			rc.log.Warn("keeping the group's configuration in step with the meta record", "err", err)
			next = time.Second
		}
		if next <= 0 {
			next = rc.interval
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-gossip:
		case <-t.C:
		}
		t.Stop()
	}
}

// step makes at most one change and says how soon to look again (0: on
// the next change, or after interval).
func (rc *reconfig) step(ctx context.Context, caughtUp map[string]time.Time) (time.Duration, error) {
	rec, ok := rc.meta.Group(rc.group)
	if !ok {
		return 0, nil // the group is gone from meta: the managers close it
	}
	f := rc.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, raftgroup.MapError("get configuration", err)
	}
	servers, index := f.Configuration().Servers, f.Index()
	c := nextChange(rc.self, rec.Replicas, servers, rc.addr)
	switch {
	case c.handOver != "":
		rc.log.Info("the meta record no longer names this leader; handing the group's leadership over", "to", c.handOver, "replicas", rec.Replicas)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := rc.g.TransferLeadership(tctx, c.handOver)
		cancel()
		return time.Second, err
	case c.add != "":
		rc.log.Info("adding a replica the meta record names, as a nonvoter", "id", c.add, "epoch", rec.Epoch)
		err := rc.r.AddNonvoter(raft.ServerID(c.add), raft.ServerAddress(rc.addr(c.add)), index, 0).Error()
		rc.ms.NotifyChanged()
		return 0, raftgroup.MapError("add nonvoter "+c.add, err)
	case len(c.promote) > 0:
		return rc.promote(ctx, caughtUp, c.promote, index)
	case c.remove != "":
		rc.log.Info("removing a server the meta record no longer names", "id", c.remove, "epoch", rec.Epoch)
		err := rc.g.RemoveServer(ctx, c.remove, index)
		rc.ms.NotifyChanged()
		return 0, err
	}
	clear(caughtUp)
	return 0, nil
}

// promote promotes the first of ids (nonvoters the record names) whose
// applied index has stayed within maxLag of the commit index for
// promoteAfter; it returns when to check again.
func (rc *reconfig) promote(ctx context.Context, caughtUp map[string]time.Time, ids []string, index uint64) (time.Duration, error) {
	recheck := min(max(rc.promoteAfter/3, 50*time.Millisecond), time.Second)
	if rc.progress == nil {
		return 0, nil // nothing can tell: they stay nonvoters
	}
	now := time.Now()
	for _, id := range ids {
		grpc, _, ok := rc.ms.APIAddrs(id)
		if !ok || grpc == "" {
			delete(caughtUp, id)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, progressTimeout)
		applied, err := rc.progress(pctx, rc.group, id, grpc)
		cancel()
		if commit := rc.r.CommitIndex(); err != nil || commit > applied+rc.maxLag {
			delete(caughtUp, id)
			continue
		}
		since, ok := caughtUp[id]
		if !ok {
			caughtUp[id] = now
			continue
		}
		if now.Sub(since) < rc.promoteAfter {
			continue
		}
		rc.log.Info("promoting a caught-up replica to voter", "id", id, "applied", applied)
		if err := rc.r.AddVoter(raft.ServerID(id), raft.ServerAddress(rc.addr(id)), index, 0).Error(); err != nil {
			return recheck, raftgroup.MapError("promote "+id, err)
		}
		delete(caughtUp, id)
		rc.ms.NotifyChanged()
		return 0, nil
	}
	return recheck, nil
}

// addr is where node id's Raft port is: gossip, the address every group
// of the node shares ("" while unknown).
func (rc *reconfig) addr(id string) string {
	if md, ok := rc.ms.MetaOf(id); ok {
		return md.Raft
	}
	for _, mem := range rc.meta.Members() {
		if mem.NodeID == id {
			return mem.RaftAddr
		}
	}
	return ""
}

// change is the next configuration change a placed group's leader makes
// (at most one of them set).
type change struct {
	handOver string   // a voter of the record to hand leadership to
	add      string   // a replica missing from the configuration
	promote  []string // nonvoters the record names, to promote once caught up
	remove   string   // a server the record does not name
}

// nextChange decides the leader's next change: if the record drops this
// leader, hand leadership to a voter the record names (the next leader
// removes this one; with none yet, first add and promote one); else add
// the first missing replica whose address is known; else promote a
// nonvoter of the record; else remove a server the record does not name
// (a nonvoter first, never this leader), a voter only while the voters
// the record names left after it are a quorum of the record.
func nextChange(self string, replicas []string, servers []raft.Server, addr func(string) string) change {
	in := map[string]raft.ServerSuffrage{}
	for _, s := range servers {
		in[string(s.ID)] = s.Suffrage
	}
	var promote []string
	recordVoters := 0
	for _, id := range replicas {
		switch s, ok := in[id]; {
		case !ok:
		case s == raft.Voter:
			recordVoters++
		default:
			promote = append(promote, id)
		}
	}
	if !slices.Contains(replicas, self) {
		for _, id := range replicas {
			if s, ok := in[id]; ok && s == raft.Voter {
				return change{handOver: id}
			}
		}
	}
	for _, id := range replicas {
		if _, ok := in[id]; !ok && addr(id) != "" {
			return change{add: id}
		}
	}
	if len(promote) > 0 {
		return change{promote: promote}
	}
	var extraVoter string
	for _, s := range servers {
		id := string(s.ID)
		if slices.Contains(replicas, id) || id == self {
			continue
		}
		if s.Suffrage != raft.Voter {
			return change{remove: id}
		}
		if extraVoter == "" {
			extraVoter = id
		}
	}
	if extraVoter != "" && recordVoters >= len(replicas)/2+1 {
		return change{remove: extraVoter}
	}
	return change{}
}
