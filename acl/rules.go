package acl

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// The changes. Each returns a new Auth and leaves a unchanged, or an
// error and no Auth. A state machine that checks something between the
// validation of a command and its effect (fsm/state's idempotency keys)
// calls CheckToken first and the change after, in that order, which is
// the order of the errors a caller sees.

// CheckToken validates a token to be created at stampMs (the entry's own
// stamp, the leader's clock when it proposed): its names, a 32-byte hash,
// and an expiry that is 0 or after stampMs, so every replica decides
// alike.
func CheckToken(name, ident string, sha256 []byte, expiresUnixMs, stampMs int64) error {
	switch {
	case ValidateIdentity(name) != nil:
		return ValidateIdentity(name)
	case ValidateIdentity(ident) != nil:
		return ValidateIdentity(ident)
	case len(sha256) != 32:
		return fmt.Errorf("%w: sha256 must be 32 bytes", ErrInvalid)
	case expiresUnixMs < 0 || expiresUnixMs != 0 && expiresUnixMs <= stampMs:
		return fmt.Errorf("%w: token expires before it is created", ErrInvalid)
	}
	return nil
}

// AddToken stores a token that CheckToken accepted: refused past
// MaxTokens, under a name that exists, or with a hash that is stored.
func (a *Auth) AddToken(name, ident string, sha256 []byte, expiresUnixMs, stampMs int64) (*Auth, error) {
	if len(a.tokens) >= MaxTokens {
		return nil, fmt.Errorf("%w: %d tokens exist", ErrLimit, MaxTokens)
	}
	if _, ok := a.tokens[name]; ok {
		return nil, fmt.Errorf("%w: %s", ErrTokenExists, name)
	}
	t := Token{Name: name, Identity: ident, CreatedUnixMs: stampMs, ExpiresUnixMs: expiresUnixMs}
	copy(t.Hash[:], sha256)
	if _, ok := a.byHash[t.Hash]; ok {
		// 256 random bits never collide; a replayed proposal might.
		return nil, fmt.Errorf("%w: token hash already stored", ErrTokenExists)
	}
	n := a.clone()
	n.tokens[t.Name] = t
	n.byHash[t.Hash] = t.Name
	return n, nil
}

// RemoveToken deletes a token by name.
func (a *Auth) RemoveToken(name string) (*Auth, error) {
	t, ok := a.tokens[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTokenNotFound, name)
	}
	n := a.clone()
	delete(n.tokens, t.Name)
	delete(n.byHash, t.Hash)
	return n, nil
}

// Grant adds perms on pattern to ident (a union with what it holds there
// already), or, with admin, the admin role (then pattern and perms are
// empty).
func (a *Auth) Grant(ident, pattern string, perms uint32, admin bool) (*Auth, error) {
	if err := ValidateIdentity(ident); err != nil {
		return nil, err
	}
	id := a.idents[ident]
	if admin {
		if pattern != "" || perms != 0 {
			return nil, fmt.Errorf("%w: an admin grant names no pattern or permissions", ErrInvalid)
		}
		id.admin = true
	} else {
		if err := ValidatePattern(pattern); err != nil {
			return nil, err
		}
		p := Perm(perms)
		if p == 0 || p&^AllPerms != 0 {
			return nil, fmt.Errorf("%w: permissions %#x", ErrInvalid, perms)
		}
		grants := slices.Clone(id.grants)
		i, found := slices.BinarySearchFunc(grants, pattern, func(g PatternGrant, p string) int { return strings.Compare(g.Pattern, p) })
		switch {
		case found:
			grants[i].Perms |= p
		case len(grants) >= MaxGrants:
			return nil, fmt.Errorf("%w: %d grants per identity", ErrLimit, MaxGrants)
		default:
			grants = slices.Insert(grants, i, PatternGrant{Pattern: pattern, Perms: p})
		}
		id.grants = grants
	}
	n := a.clone()
	n.idents[ident] = id
	return n, nil
}

// Ungrant removes ident's grant on pattern or, with admin, its admin role
// (then pattern is empty). An identity left with nothing is forgotten.
func (a *Auth) Ungrant(ident, pattern string, admin bool) (*Auth, error) {
	id, ok := a.idents[ident]
	if admin {
		if pattern != "" {
			return nil, fmt.Errorf("%w: an admin ungrant names no pattern", ErrInvalid)
		}
		if !ok || !id.admin {
			return nil, fmt.Errorf("%w: %s is not an admin", ErrGrantNotFound, ident)
		}
		id.admin = false
	} else {
		i := -1
		if ok {
			i = slices.IndexFunc(id.grants, func(g PatternGrant) bool { return g.Pattern == pattern })
		}
		if i < 0 {
			return nil, fmt.Errorf("%w: %s has no grant on %q", ErrGrantNotFound, ident, pattern)
		}
		id.grants = slices.Delete(slices.Clone(id.grants), i, i+1)
	}
	n := a.clone()
	if !id.admin && len(id.grants) == 0 {
		delete(n.idents, ident)
	} else {
		n.idents[ident] = id
	}
	return n, nil
}

// Record is the snapshot form of a: tokens by name, identities by name,
// grants by pattern, so equal states serialise to equal bytes.
func (a *Auth) Record() *fsmv1.AuthRecord {
	rec := &fsmv1.AuthRecord{}
	for _, name := range slices.Sorted(maps.Keys(a.tokens)) {
		t := a.tokens[name]
		rec.Tokens = append(rec.Tokens, &fsmv1.TokenRecord{
			Name: t.Name, Identity: t.Identity, Sha256: t.Hash[:],
			ExpiresUnixMs: t.ExpiresUnixMs, CreatedUnixMs: t.CreatedUnixMs,
		})
	}
	for _, name := range slices.Sorted(maps.Keys(a.idents)) {
		id := a.idents[name]
		ir := &fsmv1.IdentityRecord{Identity: name, Admin: id.admin}
		for _, g := range id.grants {
			ir.Grants = append(ir.Grants, &fsmv1.PatternGrant{Pattern: g.Pattern, Perms: uint32(g.Perms)})
		}
		rec.Identities = append(rec.Identities, ir)
	}
	return rec
}

// Load rebuilds an Auth from its snapshot record, checking it as the
// changes would have.
func Load(rec *fsmv1.AuthRecord) (*Auth, error) {
	a := New()
	for _, tr := range rec.GetTokens() {
		if ValidateIdentity(tr.Name) != nil || ValidateIdentity(tr.Identity) != nil || len(tr.Sha256) != 32 {
			return nil, fmt.Errorf("%w: token record %q", ErrInvalid, tr.Name)
		}
		t := Token{Name: tr.Name, Identity: tr.Identity, CreatedUnixMs: tr.CreatedUnixMs, ExpiresUnixMs: tr.ExpiresUnixMs}
		copy(t.Hash[:], tr.Sha256)
		if _, dup := a.tokens[t.Name]; dup {
			return nil, fmt.Errorf("%w: token %q twice", ErrInvalid, t.Name)
		}
		if _, dup := a.byHash[t.Hash]; dup {
			return nil, fmt.Errorf("%w: token hash twice", ErrInvalid)
		}
		a.tokens[t.Name], a.byHash[t.Hash] = t, t.Name
	}
	for _, ir := range rec.GetIdentities() {
		if err := ValidateIdentity(ir.Identity); err != nil {
			return nil, err
		}
		if _, dup := a.idents[ir.Identity]; dup {
			return nil, fmt.Errorf("%w: identity %q twice", ErrInvalid, ir.Identity)
		}
		id := identity{admin: ir.Admin}
		for _, g := range ir.Grants {
			if err := ValidatePattern(g.Pattern); err != nil {
				return nil, err
			}
			if p := Perm(g.Perms); p == 0 || p&^AllPerms != 0 {
				return nil, fmt.Errorf("%w: grant perms %#x", ErrInvalid, g.Perms)
			}
			if n := len(id.grants); n > 0 && id.grants[n-1].Pattern >= g.Pattern {
				return nil, fmt.Errorf("%w: grants of %q out of order", ErrInvalid, ir.Identity)
			}
			id.grants = append(id.grants, PatternGrant{Pattern: g.Pattern, Perms: Perm(g.Perms)})
		}
		if !id.admin && len(id.grants) == 0 {
			return nil, fmt.Errorf("%w: identity %q with nothing granted", ErrInvalid, ir.Identity)
		}
		a.idents[ir.Identity] = id
	}
	return a, nil
}
