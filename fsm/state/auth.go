package state

import (
	"fmt"

	"github.com/raftq/raftq/acl"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// AuthVersion is the log version that brings identities, tokens and
// permissions into the state (CreateToken, RevokeToken, AuthGrant,
// AuthUngrant), random lease tokens in grants, and snapshot format 5,
// which carries the auth record.
const AuthVersion uint32 = 5

// The rules of identities, tokens and grants are package acl's, shared
// with the meta group's state machine; the store holds the value and
// adds what is its own (versions, idempotency keys, the entry's stamp).
type (
	// Perm is a set of queue permissions.
	Perm = acl.Perm
	// Token is a stored bearer token: its hash, never the secret.
	Token = acl.Token
	// PatternGrant is the permissions an identity holds on one pattern.
	PatternGrant = acl.PatternGrant
	// IdentityInfo is one identity as `raftq auth list` shows it.
	IdentityInfo = acl.IdentityInfo
	// Auth is the replicated identities, tokens and grants (immutable).
	Auth = acl.Auth
)

// The queue permissions; the admin role is separate and implies them all.
const (
	PermProduce = acl.PermProduce
	PermConsume = acl.PermConsume
	PermBrowse  = acl.PermBrowse
	PermManage  = acl.PermManage
	AllPerms    = acl.AllPerms
)

// ParsePerm reads one permission name.
func ParsePerm(name string) (Perm, error) { return acl.ParsePerm(name) }

// Limits of auth names and patterns.
const (
	MaxIdentityLen = acl.MaxIdentityLen
	MaxPatternLen  = acl.MaxPatternLen
	MaxGrants      = acl.MaxGrants
	MaxTokens      = acl.MaxTokens
)

// A pattern is at most a queue name long.
var _ [MaxPatternLen - MaxQueueNameLen]struct{}
var _ [MaxQueueNameLen - MaxPatternLen]struct{}

// ValidateIdentity checks an identity or token name: 1–128 characters of
// [A-Za-z0-9._@-] (a certificate's common name must fit this to be used).
func ValidateIdentity(name string) error { return acl.ValidateIdentity(name) }

// ValidatePattern checks a queue name pattern: queue-name characters and
// '*', 1–255 characters.
func ValidatePattern(p string) error { return acl.ValidatePattern(p) }

// MatchPattern reports whether name matches pattern, where '*' matches any
// run of characters (dots included) and everything else itself.
func MatchPattern(pattern, name string) bool { return acl.MatchPattern(pattern, name) }

// Auth is the current auth state (immutable; see Auth).
func (s *Store) Auth() *Auth { return s.auth }

// Auth errors.
var (
	ErrTokenExists   = acl.ErrTokenExists
	ErrTokenNotFound = acl.ErrTokenNotFound
	ErrGrantNotFound = acl.ErrGrantNotFound
)

// CreateToken stores a token's hash. An already expired token (by the
// entry's own stamp, the leader's clock when it proposed) is refused, so
// every replica decides alike.
func (tx *Tx) CreateToken(c *fsmv1.CreateToken) Result {
	if err := tx.moved("CreateToken"); err != nil {
		return failed(err)
	}
	if err := acl.CheckToken(c.GetName(), c.GetIdentity(), c.GetSha256(), c.GetExpiresUnixMs(), tx.stampMs); err != nil {
		return failed(err)
	}
	k, err := tx.writeKey(recentCreateToken, c.GetName(), c.GetIdempotencyKey())
	switch {
	case err != nil:
		return failed(err)
	case tx.repeat(k):
		return failed(errAnswerLost(c.GetName()))
	}
	n, err := tx.s.auth.AddToken(c.Name, c.Identity, c.Sha256, c.ExpiresUnixMs, tx.stampMs)
	if err != nil {
		return failed(err)
	}
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// RevokeToken deletes a token by name.
func (tx *Tx) RevokeToken(c *fsmv1.RevokeToken) Result {
	if err := tx.moved("RevokeToken"); err != nil {
		return failed(err)
	}
	if err := ValidateIdentity(c.GetName()); err != nil && tx.version >= WriteKeyVersion && c.GetIdempotencyKey() != "" {
		return failed(err)
	}
	k, err := tx.writeKey(recentRevokeToken, c.GetName(), c.GetIdempotencyKey())
	switch {
	case err != nil:
		return failed(err)
	case tx.repeat(k):
		return &Done{}
	}
	n, err := tx.s.auth.RemoveToken(c.GetName())
	if err != nil {
		return failed(err)
	}
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// AuthGrant adds permissions on a pattern (a union with what the identity
// holds there already), or the admin role.
func (tx *Tx) AuthGrant(c *fsmv1.AuthGrant) Result {
	if err := tx.moved("Grant"); err != nil {
		return failed(err)
	}
	if err := ValidateIdentity(c.GetIdentity()); err != nil {
		return failed(err)
	}
	k, err := tx.writeKey(recentGrant, c.GetIdentity(), c.GetIdempotencyKey())
	switch {
	case err != nil:
		return failed(err)
	case tx.repeat(k):
		return &Done{}
	}
	n, err := tx.s.auth.Grant(c.GetIdentity(), c.GetPattern(), c.GetPerms(), c.GetAdmin())
	if err != nil {
		return failed(err)
	}
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// AuthUngrant removes the grant on a pattern, or the admin role.
func (tx *Tx) AuthUngrant(c *fsmv1.AuthUngrant) Result {
	if err := tx.moved("Ungrant"); err != nil {
		return failed(err)
	}
	if err := ValidateIdentity(c.GetIdentity()); err != nil && tx.version >= WriteKeyVersion && c.GetIdempotencyKey() != "" {
		return failed(err)
	}
	k, err := tx.writeKey(recentUngrant, c.GetIdentity(), c.GetIdempotencyKey())
	switch {
	case err != nil:
		return failed(err)
	case tx.repeat(k):
		return &Done{}
	}
	n, err := tx.s.auth.Ungrant(c.GetIdentity(), c.GetPattern(), c.GetAdmin())
	if err != nil {
		return failed(err)
	}
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// errAnswerLost is a keyed CreateToken's repeat: the secret was only in
// the first attempt's answer.
func errAnswerLost(name string) error {
	return fmt.Errorf("%w: token %s was created by this call's first attempt, whose answer was lost; its secret was only in that answer and is never stored: revoke %s and create it again",
		ErrAnswerLost, name, name)
}
