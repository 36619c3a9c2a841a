package transport

import (
	"context"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// authService serves identities, tokens and grants. The interceptor has
// checked the admin role (WhoAmI: any identity) before a method runs; the
// changing methods run on the leader (forward.go).
type authService struct {
	raftqv1.UnimplementedAuthServer
	s *Server
}

// maxTokenTTL bounds --expires: far enough for any rotation schedule,
// near enough that the instant cannot overflow.
const maxTokenTTL = 100 * 365 * 24 * time.Hour

func (a authService) CreateToken(ctx context.Context, req *raftqv1.CreateTokenRequest) (*raftqv1.CreateTokenResponse, error) {
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if err := fsm.ValidateIdentity(req.GetName()); err != nil {
		return nil, invalid("name: %v", err)
	}
	if id := req.GetIdentity(); id != "" {
		if err := fsm.ValidateIdentity(id); err != nil {
			return nil, invalid("identity: %v", err)
		}
	}
	ttl := time.Duration(req.GetExpiresInMs()) * time.Millisecond
	if req.GetExpiresInMs() < 0 || ttl > maxTokenTTL {
		return nil, invalid("expires_in_ms must be between 0 (never) and %d", maxTokenTTL.Milliseconds())
	}
	t, err := a.s.authAdmin(req.GetIdempotencyKey()).CreateToken(ctx, req.Name, req.GetIdentity(), ttl)
	if err != nil {
		return nil, err
	}
	return &raftqv1.CreateTokenResponse{Name: t.Name, Identity: t.Identity, Token: t.Token, ExpiresUnixMs: t.ExpiresUnixMs}, nil
}

func (a authService) RevokeToken(ctx context.Context, req *raftqv1.RevokeTokenRequest) (*raftqv1.RevokeTokenResponse, error) {
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if err := fsm.ValidateIdentity(req.GetName()); err != nil {
		return nil, invalid("name: %v", err)
	}
	if err := a.s.authAdmin(req.GetIdempotencyKey()).RevokeToken(ctx, req.Name); err != nil {
		return nil, err
	}
	return &raftqv1.RevokeTokenResponse{}, nil
}

func (a authService) Grant(ctx context.Context, req *raftqv1.GrantRequest) (*raftqv1.GrantResponse, error) {
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if err := fsm.ValidateIdentity(req.GetIdentity()); err != nil {
		return nil, invalid("identity: %v", err)
	}
	var perms fsm.Perm
	if req.GetAdmin() {
		if req.GetPattern() != "" || len(req.GetAllow()) > 0 {
			return nil, invalid("an admin grant names no pattern or permissions")
		}
	} else {
		if err := fsm.ValidatePattern(req.GetPattern()); err != nil {
			return nil, invalid("pattern: %v", err)
		}
		if len(req.GetAllow()) == 0 {
			return nil, invalid("allow: name at least one of produce, consume, browse, manage")
		}
		for _, name := range req.GetAllow() {
			p, err := fsm.ParsePerm(name)
			if err != nil {
				return nil, invalid("allow: %v", err)
			}
			perms |= p
		}
	}
	if err := a.s.authAdmin(req.GetIdempotencyKey()).Grant(ctx, req.Identity, req.GetPattern(), perms, req.GetAdmin()); err != nil {
		return nil, err
	}
	return &raftqv1.GrantResponse{}, nil
}

func (a authService) Ungrant(ctx context.Context, req *raftqv1.UngrantRequest) (*raftqv1.UngrantResponse, error) {
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if err := fsm.ValidateIdentity(req.GetIdentity()); err != nil {
		return nil, invalid("identity: %v", err)
	}
	if req.GetAdmin() {
		if req.GetPattern() != "" {
			return nil, invalid("an admin ungrant names no pattern")
		}
	} else if err := fsm.ValidatePattern(req.GetPattern()); err != nil {
		return nil, invalid("pattern: %v", err)
	}
	if err := a.s.authAdmin(req.GetIdempotencyKey()).Ungrant(ctx, req.Identity, req.GetPattern(), req.GetAdmin()); err != nil {
		return nil, err
	}
	return &raftqv1.UngrantResponse{}, nil
}

func (a authService) ListAuth(context.Context, *raftqv1.ListAuthRequest) (*raftqv1.ListAuthResponse, error) {
	out := &raftqv1.ListAuthResponse{}
	for _, id := range a.s.authState().Identities() {
		ii := &raftqv1.IdentityInfo{Name: id.Name, Admin: id.Admin, Grants: grantsOut(id.Grants)}
		for _, t := range id.Tokens {
			ii.Tokens = append(ii.Tokens, &raftqv1.TokenInfo{Name: t.Name, CreatedUnixMs: t.CreatedUnixMs, ExpiresUnixMs: t.ExpiresUnixMs})
		}
		out.Identities = append(out.Identities, ii)
	}
	return out, nil
}

func (a authService) WhoAmI(ctx context.Context, _ *raftqv1.WhoAmIRequest) (*raftqv1.WhoAmIResponse, error) {
	p := auth.PrincipalFrom(ctx)
	if p == nil {
		return nil, invalid("no caller") // the interceptor always sets one
	}
	return &raftqv1.WhoAmIResponse{Identity: p.Name, Kind: string(p.Kind), Admin: a.s.cfg.Auth.IsAdmin(p), Grants: grantsOut(a.s.cfg.Auth.Grants(p))}, nil
}

func grantsOut(gs []fsm.PatternGrant) []*raftqv1.PermissionGrant {
	var out []*raftqv1.PermissionGrant
	for _, g := range gs {
		out = append(out, &raftqv1.PermissionGrant{Pattern: g.Pattern, Allow: g.Perms.Names()})
	}
	return out
}
