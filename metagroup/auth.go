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

// SettingsChange is a SetSettings: each nil field is left as it is.
type SettingsChange struct {
	MaxQueuedBytes, MaxQueues *int64
	// Groups: how many data groups the pool keeps (1..MaxGroupsSetting).
	// Replicas: each data group's voters (odd, 1..MaxReplicasSetting).
	Groups, Replicas *uint32
	IdempotencyKey   string
}

// check refuses a change the API does not take, before anything is
// proposed (so nothing changes): the meta log takes a wider range (0 =
// the default, groups up to 65,536), which an API call does not set.
func (ch SettingsChange) check() error {
	for name, v := range map[string]*int64{"max_queued_bytes": ch.MaxQueuedBytes, "max_queues": ch.MaxQueues} {
		if v != nil && *v < 0 {
			return fmt.Errorf("%w: %s is negative (%d)", meta.ErrInvalid, name, *v)
		}
	}
	if n := ch.Groups; n != nil && (*n < 1 || *n > meta.MaxGroupsSetting) {
		return fmt.Errorf("%w: groups %d: the number of data groups is 1 to %d", meta.ErrInvalid, *n, meta.MaxGroupsSetting)
	}
	if n := ch.Replicas; n != nil && (*n < 1 || *n > meta.MaxReplicasSetting || *n%2 == 0) {
		// Odd: an even voter count tolerates no more failures than the
		// odd one below it, and the meta log refuses it.
		return fmt.Errorf("%w: replicas %d: a data group's voters are an odd number from 1 to %d", meta.ErrInvalid, *n, meta.MaxReplicasSetting)
	}
	return nil
}

// SetSettings changes the cluster settings ch sets and returns them as
// committed. The data group's leader then proposes max_queued_bytes (its
// share) and max_queues into the data log (broker's meta follower); the
// meta leader's pool duty follows groups and replicas (duties.go).
func (g *Group) SetSettings(ctx context.Context, ch SettingsChange) (meta.Settings, error) {
	if err := ch.check(); err != nil {
		return meta.Settings{}, err
	}
	_, err := g.Propose(ctx, &metav1.Command{Op: &metav1.Command_SetSettings{SetSettings: &metav1.SetSettings{
		MaxQueuedBytes: ch.MaxQueuedBytes, MaxQueues: ch.MaxQueues, Groups: ch.Groups, Replicas: ch.Replicas,
		IdempotencyKey: ch.IdempotencyKey}}})
	if err != nil {
		return meta.Settings{}, err
	}
	return g.fsm.Settings(), nil
}
