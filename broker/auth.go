package broker

import (
	"context"

	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/acl"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TokenPrefix starts every bearer token raftq draws (acl.TokenPrefix).
const TokenPrefix = acl.TokenPrefix

// ErrAuthNotEnabled: the cluster version is below fsm.AuthVersion, so
// some voter's build does not know the auth commands yet; they are not
// proposed until every voter runs one that does.
var ErrAuthNotEnabled = errors.New("identities and grants need every voter at log version 5 (upgrade every node)")

// Auth is the broker's identity and permission administration: a facet
// of Broker (Broker.Auth). The checks themselves read fsm.Reader.Auth.
type Auth struct {
	b   *Broker
	key string // the idempotency key the next write carries (Keyed)
}

// Auth returns the auth administration facet.
func (b *Broker) Auth() Auth { return Auth{b: b} }

// Keyed returns the facet whose writes carry key (from fsm.WriteKeyVersion:
// a repeat changes nothing; before it a key is refused, NeedsVersionError
// naming field).
func (a Auth) Keyed(key string) Auth { a.key = key; return a }

// checkKey refuses a key the cluster does not honour yet.
func (a Auth) checkKey(field string) error {
	if a.key == "" {
		return nil
	}
	return a.b.versions.need(fsm.WriteKeyVersion, field)
}

// NewToken draws a bearer token (acl.NewToken).
func NewToken() (string, error) { return acl.NewToken() }

// HashToken is the SHA-256 of a bearer token as the cluster stores it.
func HashToken(token string) [32]byte { return acl.HashToken(token) }

// CreatedToken is a new token, whose secret only this answer carries
// (acl.CreatedToken).
type CreatedToken = acl.CreatedToken

func (a Auth) propose(ctx context.Context, cmd *fsmv1.Command) error {
	if a.b.reads.ClusterVersion() < fsm.AuthVersion {
		return ErrAuthNotEnabled
	}
	_, err := apply[*fsm.Done](ctx, a.b, cmd)
	return err
}

// CreateToken draws a token for identity (name when empty), valid for ttl
// (0: no expiry), and proposes only its hash.
func (a Auth) CreateToken(ctx context.Context, name, identity string, ttl time.Duration) (*CreatedToken, error) {
	if identity == "" {
		identity = name
	}
	if err := a.checkKey("CreateToken.idempotency_key"); err != nil {
		return nil, err
	}
	tok, err := NewToken()
	if err != nil {
		return nil, err
	}
	var expires int64
	if ttl > 0 {
		expires = a.b.clock.Now().Add(ttl).UnixMilli()
	}
	h := HashToken(tok)
	err = a.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{
		Name: name, Identity: identity, Sha256: h[:], ExpiresUnixMs: expires, IdempotencyKey: a.key}}})
	if err != nil {
		return nil, err
	}
	return &CreatedToken{Name: name, Identity: identity, Token: tok, ExpiresUnixMs: expires}, nil
}

// RevokeToken deletes a token by name.
func (a Auth) RevokeToken(ctx context.Context, name string) error {
	if err := a.checkKey("RevokeToken.idempotency_key"); err != nil {
		return err
	}
	return a.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: name, IdempotencyKey: a.key}}})
}

// Grant adds perms on pattern to identity, or (admin) the admin role.
func (a Auth) Grant(ctx context.Context, identity, pattern string, perms fsm.Perm, admin bool) error {
	if err := a.checkKey("Grant.idempotency_key"); err != nil {
		return err
	}
	return a.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{
		Identity: identity, Pattern: pattern, Perms: uint32(perms), Admin: admin, IdempotencyKey: a.key}}})
}

// Ungrant removes identity's grant on pattern, or (admin) its admin role.
func (a Auth) Ungrant(ctx context.Context, identity, pattern string, admin bool) error {
	if err := a.checkKey("Ungrant.idempotency_key"); err != nil {
		return err
	}
	return a.propose(ctx, &fsmv1.Command{Op: &fsmv1.Command_AuthUngrant{AuthUngrant: &fsmv1.AuthUngrant{
		Identity: identity, Pattern: pattern, Admin: admin, IdempotencyKey: a.key}}})
}

// drawLeaseTokens gives every grant of a LeaseGrant (or of an Ack that
// carries grants) proposed under log version 5 or later its random lease
// token (never 0). Drawn here, where time is stamped, so the scheduler
// stays a pure picker and the entry carries the value every replica
// stores.
func drawLeaseTokens(cmd *fsmv1.Command) error {
	grants := cmd.GetLeaseGrant().GetGrants()
	if grants == nil {
		grants = cmd.GetAck().GetGrants()
	}
	if len(grants) == 0 || cmd.Version < fsm.AuthVersion {
		return nil
	}
	buf := make([]byte, 8*len(grants))
	if _, err := rand.Read(buf); err != nil {
		return fmt.Errorf("draw lease tokens: %w", err)
	}
	for i, g := range grants {
		if g == nil || g.LeaseToken != 0 {
			continue
		}
		g.LeaseToken = max(binary.BigEndian.Uint64(buf[8*i:]), 1)
	}
	return nil
}
