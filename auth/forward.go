package auth

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Forwarder is the client side of auth: what this node sends with its
// calls to peers. It depends on the configuration alone (the mode and the
// bootstrap token), not on the replicated auth state, so the host builds
// it, and the peer pool over it, before the state machine exists.
type Forwarder struct {
	mode Mode
	// selfBearer is what this node sends on its own calls to peers (a
	// hand-back, a digest request) when it has no certificate to show.
	selfBearer string
}

// NewForwarder is the client side of the Authenticator New(cfg) builds;
// cfg.State is not read.
func NewForwarder(cfg Config) *Forwarder {
	f := &Forwarder{mode: cfg.Mode}
	if f.mode == "" {
		f.mode = ModeNone
	}
	if cfg.BootstrapToken != "" && !cfg.NodeTLS {
		// A peer that reads another bootstrap file would refuse it;
		// over TLS the node certificate is the node's credential.
		f.selfBearer = cfg.BootstrapToken
	}
	return f
}

// ClientUnary is the client interceptor of a node's connections to its
// peers (forwarding to the leader, digests, hand-backs). It carries the
// caller's identity with the call: a bearer token as it came (the leader
// checks it again), any other identity as identity headers, which the
// peer honours only because this node presents a node certificate. A
// call the node makes on its own account carries the bootstrap token
// when it has one; over TLS its node certificate speaks for it.
func (a *Forwarder) ClientUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(a.Outgoing(ctx), method, req, reply, cc, opts...)
}

// Outgoing adds the caller's credentials (see ClientUnary) to ctx's
// outgoing metadata.
func (a *Forwarder) Outgoing(ctx context.Context) context.Context {
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
