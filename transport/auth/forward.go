package auth

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ClientUnary is the client interceptor of a node's connections to its
// peers (forwarding to the leader, digests, hand-backs). It carries the
// caller's identity with the call: a bearer token as it came (the leader
// checks it again), any other identity as identity headers, which the
// peer honours only because this node presents a node certificate. A
// call the node makes on its own account carries the bootstrap token
// when it has one; over TLS its node certificate speaks for it.
func (a *Authenticator) ClientUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(a.Outgoing(ctx), method, req, reply, cc, opts...)
}

// Outgoing adds the caller's credentials (see ClientUnary) to ctx's
// outgoing metadata.
func (a *Authenticator) Outgoing(ctx context.Context) context.Context {
	if a.mode == ModeNone {
		return ctx
	}
	p := PrincipalFrom(ctx)
	switch {
	case p == nil && a.selfBearer != "":
		return metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer "+a.selfBearer)
	case p == nil:
		return ctx
	case p.bearer != "":
		return metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer "+p.bearer)
	default:
		admin := "false"
		if p.admin {
			admin = "true"
		}
		return metadata.AppendToOutgoingContext(ctx, identityKey, p.Name, identityKindKey, string(p.Kind), identityAdminKey, admin)
	}
}
