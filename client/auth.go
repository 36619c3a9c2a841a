package client

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// WithToken authenticates every call with a bearer token (the
// `authorization: Bearer TOKEN` metadata a raftq node started with
// --auth token expects). It is sent over plaintext connections too, so it
// works against a loopback dev node; over a network use TLS
// (WithTransportCredentials), or the token can be read on the wire.
func WithToken(token string) Option {
	return func(o *options) {
		if token != "" {
			o.dialOpts = append(o.dialOpts, grpc.WithPerRPCCredentials(bearerToken(token)))
		}
	}
}

// bearerToken is a token as per-RPC credentials.
type bearerToken string

var _ credentials.PerRPCCredentials = bearerToken("")

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so a loopback dev node works; the
// choice of TLS is the caller's (WithTransportCredentials).
func (bearerToken) RequireTransportSecurity() bool { return false }

// auth runs an Auth RPC; changes go to the leader, reads to the node the
// caller named.
func (c *Client) auth(ctx context.Context, method string, local bool, req, resp proto.Message) error {
	pick := c.pool.target
	if local {
		pick = c.pool.seedTarget
	}
	return c.invoke(ctx, path.Base(method), method, req, resp, pick)
}

// CreateToken makes a bearer token named name for identity (name when
// empty), expiring after ttl (0: never). The answer is the only place the
// token is ever shown. The call carries an idempotency key: a retry after
// a lost answer creates no second token (even if the first was revoked in
// between) and fails with FAILED_PRECONDITION saying the secret was lost
// with the answer: revoke the name and create it again.
func (c *Client) CreateToken(ctx context.Context, name, identity string, ttl time.Duration) (*raftqv1.CreateTokenResponse, error) {
	resp := &raftqv1.CreateTokenResponse{}
	req := &raftqv1.CreateTokenRequest{Name: name, Identity: identity, ExpiresInMs: ttl.Milliseconds()}
	err := c.keyed("CreateToken.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.auth(ctx, raftqv1.Auth_CreateToken_FullMethodName, false, req, resp)
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// RevokeToken deletes the token named name. The call carries an
// idempotency key: a retry after a lost answer answers OK and revokes
// nothing more, not even a token created again under the name in between.
func (c *Client) RevokeToken(ctx context.Context, name string) error {
	req := &raftqv1.RevokeTokenRequest{Name: name}
	return c.keyed("RevokeToken.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.auth(ctx, raftqv1.Auth_RevokeToken_FullMethodName, false, req, &raftqv1.RevokeTokenResponse{})
	})
}

// Grant gives identity the permissions allow ("produce", "consume",
// "browse", "manage") on queues matching pattern. The call carries an
// idempotency key: a retry after a lost answer changes nothing more, so
// it never gives back what an Ungrant took in between.
func (c *Client) Grant(ctx context.Context, identity, pattern string, allow ...string) error {
	return c.grant(ctx, &raftqv1.GrantRequest{Identity: identity, Pattern: pattern, Allow: allow})
}

// GrantAdmin gives identity the admin role (keyed as Grant).
func (c *Client) GrantAdmin(ctx context.Context, identity string) error {
	return c.grant(ctx, &raftqv1.GrantRequest{Identity: identity, Admin: true})
}

func (c *Client) grant(ctx context.Context, req *raftqv1.GrantRequest) error {
	return c.keyed("Grant.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.auth(ctx, raftqv1.Auth_Grant_FullMethodName, false, req, &raftqv1.GrantResponse{})
	})
}

// Ungrant removes identity's grant on pattern, or with admin its admin
// role. The call carries an idempotency key: a retry after a lost answer
// answers OK and never takes away a grant given again in between.
func (c *Client) Ungrant(ctx context.Context, identity, pattern string, admin bool) error {
	req := &raftqv1.UngrantRequest{Identity: identity, Pattern: pattern, Admin: admin}
	return c.keyed("Ungrant.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.auth(ctx, raftqv1.Auth_Ungrant_FullMethodName, false, req, &raftqv1.UngrantResponse{})
	})
}

// ListAuth lists identities, their token names and grants.
func (c *Client) ListAuth(ctx context.Context) ([]*raftqv1.IdentityInfo, error) {
	resp := &raftqv1.ListAuthResponse{}
	if err := c.auth(ctx, raftqv1.Auth_ListAuth_FullMethodName, true, &raftqv1.ListAuthRequest{}, resp); err != nil {
		return nil, err
	}
	return resp.Identities, nil
}

// WhoAmI tells who the cluster takes the caller for.
func (c *Client) WhoAmI(ctx context.Context) (*raftqv1.WhoAmIResponse, error) {
	resp := &raftqv1.WhoAmIResponse{}
	if err := c.auth(ctx, raftqv1.Auth_WhoAmI_FullMethodName, true, &raftqv1.WhoAmIRequest{}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}
