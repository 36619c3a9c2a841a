package transport

import (
	"context"
	"errors"
	"time"

	"github.com/raftq/raftq/acl"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftgroup"
	"google.golang.org/grpc"
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
	return s.b.Auth().Keyed(key)
}

// authState is the identities, tokens and grants as this node's replicas
// hold them: meta's once it is seeded, the data group's before (frozen
// there from the handover until the seed, which copies them).
func (s *Server) authState() *acl.Auth {
	if s.cfg.Meta != nil && s.cfg.Meta.FSM().Seeded() {
		return s.cfg.Meta.FSM().Auth()
	}
	return s.state.Auth()
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
		resp, err := handler(ctx, req)
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
	return s.forward(ctx, route, method, req)
}
