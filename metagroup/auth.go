package metagroup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/acl"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
)

// Auth is identity and permission administration once the meta group
// holds them (the data group's broker.Auth before the handover): the
// same commands, proposed into meta's log on its leader.
type Auth struct {
	g   *Group
	key string // the idempotency key the next write carries
}

// Auth returns the administration facet whose writes carry key ("" none).
func (g *Group) Auth(key string) Auth { return Auth{g: g, key: key} }

func (a Auth) propose(ctx context.Context, cmd *metav1.Command) error {
	_, err := a.g.Propose(ctx, cmd)
	if errors.Is(err, meta.ErrAnswerLost) {
		// The same answer as the data log's, so the edge maps it alike.
		return fmt.Errorf("%w: %w", fsm.ErrAnswerLost, err)
	}
	return err
}

// CreateToken draws a token for identity (name when empty), valid for ttl
// (0: no expiry), and proposes only its hash.
func (a Auth) CreateToken(ctx context.Context, name, identity string, ttl time.Duration) (*acl.CreatedToken, error) {
	if identity == "" {
		identity = name
	}
	tok, err := acl.NewToken()
	if err != nil {
		return nil, err
	}
	var expires int64
	if ttl > 0 {
		expires = a.g.cfg.Now().Add(ttl).UnixMilli()
	}
	h := acl.HashToken(tok)
	err = a.propose(ctx, &metav1.Command{Op: &metav1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{
		Name: name, Identity: identity, Sha256: h[:], ExpiresUnixMs: expires, IdempotencyKey: a.key}}})
	if err != nil {
		return nil, err
	}
	return &acl.CreatedToken{Name: name, Identity: identity, Token: tok, ExpiresUnixMs: expires}, nil
}

// RevokeToken deletes a token by name.
func (a Auth) RevokeToken(ctx context.Context, name string) error {
	return a.propose(ctx, &metav1.Command{Op: &metav1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: name, IdempotencyKey: a.key}}})
}

// Grant adds perms on pattern to identity, or (admin) the admin role.
func (a Auth) Grant(ctx context.Context, identity, pattern string, perms acl.Perm, admin bool) error {
	return a.propose(ctx, &metav1.Command{Op: &metav1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{
		Identity: identity, Pattern: pattern, Perms: uint32(perms), Admin: admin, IdempotencyKey: a.key}}})
}

// Ungrant removes identity's grant on pattern, or (admin) its admin role.
func (a Auth) Ungrant(ctx context.Context, identity, pattern string, admin bool) error {
	return a.propose(ctx, &metav1.Command{Op: &metav1.Command_AuthUngrant{AuthUngrant: &fsmv1.AuthUngrant{
		Identity: identity, Pattern: pattern, Admin: admin, IdempotencyKey: a.key}}})
}

// SetSettings changes the cluster settings max_queued_bytes and max_queues
// (nil: unchanged) and returns them as committed. The data group's leader
// then proposes them into the data log (broker's meta follower).
func (g *Group) SetSettings(ctx context.Context, maxQueuedBytes, maxQueues *int64, key string) (meta.Settings, error) {
	for name, v := range map[string]*int64{"max_queued_bytes": maxQueuedBytes, "max_queues": maxQueues} {
		if v != nil && *v < 0 {
			return meta.Settings{}, fmt.Errorf("%w: %s is negative (%d)", meta.ErrInvalid, name, *v)
		}
	}
	_, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_SetSettings{SetSettings: &metav1.SetSettings{
		MaxQueuedBytes: maxQueuedBytes, MaxQueues: maxQueues, IdempotencyKey: key}}})
	if err != nil {
		return meta.Settings{}, err
	}
	return g.fsm.Settings(), nil
}
