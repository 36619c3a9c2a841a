package transport

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/acl"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// metaMethods are the writes of the cluster-wide state: from the
// handover (fsm.HandoverVersion) the meta group's leader serves them, not
// the data group's.
var metaMethods = map[string]bool{
	raftqv1.Auth_CreateToken_FullMethodName:           true,
	raftqv1.Auth_RevokeToken_FullMethodName:           true,
	raftqv1.Auth_Grant_FullMethodName:                 true,
	raftqv1.Auth_Ungrant_FullMethodName:               true,
	raftqv1.Cluster_SetClusterSettings_FullMethodName: true,
}

// authAdmin is identity and permission administration: the data group's
// (broker.Auth) before the handover, the meta group's after it.
type authAdmin interface {
	CreateToken(ctx context.Context, name, identity string, ttl time.Duration) (*acl.CreatedToken, error)
	RevokeToken(ctx context.Context, name string) error
	Grant(ctx context.Context, identity, pattern string, perms acl.Perm, admin bool) error
	Ungrant(ctx context.Context, identity, pattern string, admin bool) error
}

// metaActive reports whether the cluster-wide state lives in the meta
// group now.
func (s *Server) metaActive() bool { return s.cfg.Meta != nil && s.cfg.Meta.Active() }

// authAdmin is where identity writes go now, carrying key.
func (s *Server) authAdmin(key string) authAdmin {
	if s.metaActive() {
		return s.cfg.Meta.Auth(key)
	}
	return s.legacy.b.Auth().Keyed(key)
}

// authState is the identities, tokens and grants as this node's replicas
// hold them: meta's once it is seeded, the data group's before (frozen
// there from the handover until the seed, which copies them).
func (s *Server) authState() *acl.Auth {
	if s.cfg.Meta != nil {
		if a := s.cfg.Meta.FSM().SeededAuth(); a != nil {
			return a
		}
	}
	return s.legacy.state.Auth()
}

// atMetaLeader serves a call of metaMethods at the meta group's leader:
// here when this node leads meta, else one hop there, as atLeader does
// for the data group.
func (s *Server) atMetaLeader(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	route, err := s.cfg.Meta.Route(ctx, s.cfg.LeaderWait)
	if err != nil {
		if ctx.Err() != nil {
			return nil, toStatus(ctx.Err())
		}
		return nil, redirectError("", "")
	}
	if route.Local {
		// Between the handover and the seed (a second or two) the call
		// waits, as one waits for an election, instead of failing.
		s.awaitSeed(ctx)
		resp, err := handler(ctx, req)
		if err == nil {
			// The forwarding node waits until its own replica has
			// applied this far before it answers (below).
			_ = grpc.SetHeader(ctx, metadata.Pairs(metaIndexKey, strconv.FormatUint(s.cfg.Meta.FSM().AppliedIndex(), 10)))
		}
		if !isNotLeader(err) {
			return resp, toStatus(err)
		}
		l := s.cfg.Meta.Raft().Leadership()
		if !errors.Is(err, raftgroup.ErrNotLeader) {
			return nil, redirectError(l.LeaderID, l.LeaderClientAddr)
		}
		if route, err = s.cfg.Meta.Route(ctx, s.cfg.LeaderWait); err != nil || route.Local {
			return nil, redirectError(l.LeaderID, l.LeaderClientAddr)
		}
	}
	var hdr metadata.MD
	resp, err := s.forward(ctx, route, method, req, grpc.Header(&hdr))
	if err == nil {
		s.awaitMeta(ctx, hdr.Get(metaIndexKey))
	}
	return resp, err
}

// awaitSeed waits, on meta's leader, until its first leader's seed has
// applied, for at most LeaderWait and ctx; the write proposed after it is
// refused (ErrStarting, Unavailable) if it still has not.
func (s *Server) awaitSeed(ctx context.Context) {
	f := s.cfg.Meta.FSM()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	f.Await(ctx, f.Seeded)
}

// metaIndexKey is the response header in which meta's leader says how far
// its replica had applied when a write it served returned.
const metaIndexKey = "raftq-meta-index"

// metaCatchUp bounds how long a node waits for its meta replica to apply a
// write it forwarded: a few heartbeats normally; past it the answer goes
// out anyway (the write is committed).
const metaCatchUp = 5 * time.Second

// awaitMeta waits until this node's meta replica has applied the index
// meta's leader reported, so a call through this node right after a write
// through it (a token used, a grant relied on) sees the write: reads of
// auth and settings are served from the local replica.
func (s *Server) awaitMeta(ctx context.Context, vals []string) {
	if len(vals) != 1 {
		return
	}
	want, err := strconv.ParseUint(vals[0], 10, 64)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, metaCatchUp)
	defer cancel()
	f := s.cfg.Meta.FSM()
	if !f.Await(ctx, func() bool { return f.AppliedIndex() >= want }) {
		s.log.Warn("this node's meta replica has not applied a write it forwarded yet; answering anyway", "want", want, "applied", f.AppliedIndex())
	}
}

// awaitDataSettings waits, on meta's leader, until this node's data
// replica applies the settings meta now holds (the data leader follows
// them into its log, broker/metafollow.go): a SetClusterSettings answered
// OK is then in force for every enqueue and create proposed after it, as
// it was when the data log held the settings itself. Bounded like
// awaitMeta; the data leader may be cut off, and the write is committed.
func (s *Server) awaitDataSettings(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, metaCatchUp)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		m := s.cfg.Meta.FSM()
		g, ok := m.Group(meta.LegacyGroupID)
		_, have := s.legacy.state.Held()
		if !ok || have.MaxQueuedBytes == g.Share && have.MaxQueues == m.Settings().MaxQueues {
			return nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				s.log.Warn("the data group has not applied the meta group's new settings yet; answering anyway")
				return nil
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// metaStatus is the meta group as this node's replica sees it, nil before
// the handover (Status).
func (s *Server) metaStatus() *raftqv1.MetaStatus {
	if !s.metaActive() {
		return nil
	}
	m := s.cfg.Meta
	f := m.FSM()
	out := &raftqv1.MetaStatus{LeaderId: m.Raft().Leadership().LeaderID, Seeded: f.Seeded(), AppliedIndex: f.AppliedIndex(),
		PlacedQueues: uint64(len(f.Placed(meta.LegacyGroupID)))}
	if servers, err := raftgroup.LatestServers(m.Raft().Raft()); err == nil {
		for _, sv := range servers {
			if sv.Suffrage == raft.Voter {
				out.Voters = append(out.Voters, string(sv.ID))
			} else {
				out.Nonvoters = append(out.Nonvoters, string(sv.ID))
			}
		}
	}
	slices.Sort(out.Voters)
	slices.Sort(out.Nonvoters)
	return out
}

// isMetaTransfer: a TransferLeadership naming the meta group (its own id,
// "meta"), which its leader serves.
func isMetaTransfer(req any) bool {
	t, ok := req.(*raftqv1.TransferLeadershipRequest)
	return ok && t.GetGroup() == meta.MetaGroupID
}
