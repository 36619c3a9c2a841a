// Package auth decides who a caller of a node is and what it may do: it
// authenticates a gRPC call or an HTTP request (bearer token, client
// certificate, or a node certificate vouching for a forwarded caller),
// checks the caller's permission on the queue a request names against the
// replicated grants (fsm.Auth), and writes the audit log. It holds no
// state of its own beyond its configuration; identities, tokens and
// grants are the FSM's.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/tlsconfig"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Mode is how callers authenticate (`raftq serve --auth`).
type Mode string

// The modes.
const (
	// ModeNone: every caller may do everything (a loopback dev node).
	ModeNone Mode = "none"
	// ModeToken: a bearer token, or a client certificate from the CA.
	ModeToken Mode = "token"
	// ModeMTLS: a client certificate from the CA; its common name is the
	// identity. Bearer tokens are not accepted.
	ModeMTLS Mode = "mtls"
)

// ParseMode reads a --auth value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeNone, ModeToken, ModeMTLS:
		return m, nil
	}
	return "", fmt.Errorf("--auth %q: want none, token or mtls", s)
}

// Kind is how a principal was authenticated.
type Kind string

// The kinds of principal.
const (
	KindAnonymous   Kind = "anonymous" // auth is off
	KindToken       Kind = "token"
	KindCertificate Kind = "certificate"
	KindBootstrap   Kind = "bootstrap" // the --bootstrap-token-file token
	KindNode        Kind = "node"      // a peer presenting a node certificate
)

// BootstrapIdentity is the identity of the bootstrap token.
const BootstrapIdentity = "bootstrap"

// Principal is an authenticated caller.
type Principal struct {
	Name  string
	Kind  Kind
	admin bool // by configuration: auth off, bootstrap, --admin-cn, a node
	// bearer is the caller's token, kept only so a follower can forward
	// it to the leader as it came (never logged; String omits it).
	bearer string
}

// String names the principal for logs; it never includes a secret.
func (p *Principal) String() string { return fmt.Sprintf("%s:%s", p.Kind, p.Name) }

// Metadata keys. The identity headers are honoured only from a peer that
// presents a node certificate: a node forwarding a call vouches for the
// caller it authenticated.
const (
	authorizationKey = "authorization"
	identityKey      = "raftq-identity"
	identityKindKey  = "raftq-identity-kind"
	identityAdminKey = "raftq-identity-admin"
)

// Config configures an Authenticator.
type Config struct {
	Mode Mode
	// BootstrapToken, if set, is accepted as an admin token by this node
	// (kept only as its hash).
	BootstrapToken string
	// AdminCN, if set, is a client certificate common name given the
	// admin role.
	AdminCN string
	// State returns the replicated auth state (fsm.Reader.Auth).
	State func() *fsm.Auth
	// Now is the clock token expiry is checked against (time.Now).
	Now func() time.Time
	// Logger receives the audit lines (slog.Default()).
	Logger *slog.Logger
	// NodeTLS: this node calls its peers over mutual TLS with its node
	// certificate, which speaks for it; without it the node's own calls
	// carry the bootstrap token.
	NodeTLS bool
}

// Authenticator authenticates callers and checks permissions.
type Authenticator struct {
	mode      Mode
	bootstrap [32]byte
	hasBoot   bool
	adminCN   string
	state     func() *fsm.Auth
	now       func() time.Time
	log       *slog.Logger
	// anonymous is every caller with auth off: one read-only value, so
	// the per-call path (an Ack per message for a unary client) does
	// not allocate it each time.
	anonymous *Principal
	// Forwarder is what this node sends with its calls to peers
	// (Outgoing, ClientUnary).
	*Forwarder
}

// New returns an Authenticator. With ModeNone every call is allowed.
func New(cfg Config) *Authenticator {
	if cfg.Mode == "" {
		cfg.Mode = ModeNone
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.State == nil {
		empty := fsm.New(fsm.Options{}).Reader().Auth()
		cfg.State = func() *fsm.Auth { return empty }
	}
	a := &Authenticator{mode: cfg.Mode, adminCN: cfg.AdminCN, state: cfg.State, now: cfg.Now, log: cfg.Logger,
		anonymous: &Principal{Name: "anonymous", Kind: KindAnonymous, admin: true}, Forwarder: NewForwarder(cfg)}
	if cfg.BootstrapToken != "" {
		a.bootstrap, a.hasBoot = sha256.Sum256([]byte(cfg.BootstrapToken)), true
	}
	return a
}

// Enabled reports whether callers must authenticate.
func (a *Authenticator) Enabled() bool { return a.mode != ModeNone }

// Mode is the configured mode.
func (a *Authenticator) Mode() Mode { return a.mode }

var (
	errNoCredentials = status.Error(codes.Unauthenticated, "no credentials: send 'authorization: Bearer TOKEN' or a client certificate")
	errBadToken      = status.Error(codes.Unauthenticated, "invalid token")
	errExpiredToken  = status.Error(codes.Unauthenticated, "token expired")
)

// Authenticate finds the caller of a gRPC call from its metadata and its
// connection's verified certificate: a forwarded identity from a node, a
// bearer token (token mode), a client certificate. The error is an
// UNAUTHENTICATED status.
func (a *Authenticator) Authenticate(ctx context.Context) (*Principal, error) {
	if a.mode == ModeNone {
		return a.anonymous, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	leaf := peerCert(ctx)
	if leaf != nil {
		if node, ok := tlsconfig.NodeName(leaf); ok {
			// A node: it speaks for the caller it forwards, or for itself.
			if p := forwardedIdentity(md); p != nil {
				return p, nil
			}
			if bearer, ok := bearerFrom(first(md, authorizationKey)); ok {
				return a.token(bearer)
			}
			return &Principal{Name: node, Kind: KindNode, admin: true}, nil
		}
	}
	if a.mode == ModeToken {
		if bearer, ok := bearerFrom(first(md, authorizationKey)); ok {
			return a.token(bearer)
		}
	}
	if leaf != nil {
		return a.certificate(leaf)
	}
	return nil, errNoCredentials
}

// certificate authenticates a client certificate by its common name.
func (a *Authenticator) certificate(leaf *x509.Certificate) (*Principal, error) {
	cn := leaf.Subject.CommonName
	if err := fsm.ValidateIdentity(cn); err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "client certificate common name is not a usable identity: %v", err)
	}
	return &Principal{Name: cn, Kind: KindCertificate, admin: a.adminCN != "" && cn == a.adminCN}, nil
}

// token authenticates a bearer token: the bootstrap token, or one whose
// hash the cluster stores and that has not expired by this node's clock.
func (a *Authenticator) token(bearer string) (*Principal, error) {
	h := sha256.Sum256([]byte(bearer))
	if a.hasBoot && subtle.ConstantTimeCompare(h[:], a.bootstrap[:]) == 1 {
		return &Principal{Name: BootstrapIdentity, Kind: KindBootstrap, admin: true, bearer: bearer}, nil
	}
	t, ok := a.state().LookupToken(h)
	if !ok {
		return nil, errBadToken
	}
	if t.Expired(a.now().UnixMilli()) {
		return nil, errExpiredToken
	}
	return &Principal{Name: t.Identity, Kind: KindToken, bearer: bearer}, nil
}

// forwardedIdentity is the caller a node vouches for, if it names one.
func forwardedIdentity(md metadata.MD) *Principal {
	name := first(md, identityKey)
	if name == "" || fsm.ValidateIdentity(name) != nil {
		return nil
	}
	kind := Kind(first(md, identityKindKey))
	switch kind {
	case KindCertificate, KindBootstrap, KindNode:
	default:
		return nil // tokens travel as themselves, never as a name
	}
	return &Principal{Name: name, Kind: kind, admin: first(md, identityAdminKey) == "true"}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// bearerFrom reads "Bearer TOKEN" (the scheme case-insensitively).
func bearerFrom(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	return tok, tok != ""
}

// peerCert is the leaf certificate the call's connection presented. The
// listener's TLS config (tlsconfig.Source.ServerConfig) refuses the
// handshake unless a presented certificate chains to the CA and is
// current, so a certificate here has been verified.
func peerCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil
	}
	return ti.State.PeerCertificates[0]
}

// IsAdmin reports whether p holds the admin role.
func (a *Authenticator) IsAdmin(p *Principal) bool {
	return p.admin || a.state().IsAdmin(p.Name)
}

// Allowed reports whether p holds perm on queue.
func (a *Authenticator) Allowed(p *Principal, perm fsm.Perm, queue string) bool {
	return p.admin || a.state().Allowed(p.Name, perm, queue)
}

// Grants lists what p holds on queues (nothing for a configured admin,
// whose role covers everything).
func (a *Authenticator) Grants(p *Principal) []fsm.PatternGrant { return a.state().Grants(p.Name) }

// ErrDenied wraps every permission refusal.
var ErrDenied = errors.New("permission denied")

// denied is the PERMISSION_DENIED status naming what is missing.
func denied(p *Principal, perm, queue string) error {
	if queue == "" {
		return status.Errorf(codes.PermissionDenied, "%s lacks the %s permission", p.Name, perm)
	}
	return status.Errorf(codes.PermissionDenied, "%s lacks the %s permission on queue %s", p.Name, perm, queue)
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom is the caller the interceptor or the HTTP middleware
// authenticated (nil outside them).
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// HashOf is the SHA-256 of a token, as the cluster stores it.
func HashOf(token string) [32]byte { return sha256.Sum256([]byte(token)) }
