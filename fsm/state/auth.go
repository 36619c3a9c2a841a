package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// AuthVersion is the log version that brings identities, tokens and
// permissions into the state (CreateToken, RevokeToken, AuthGrant,
// AuthUngrant), random lease tokens in grants, and snapshot format 5,
// which carries the auth record.
const AuthVersion uint32 = 5

// Perm is a set of queue permissions.
type Perm uint32

// The queue permissions; the admin role is separate and implies them all.
const (
	PermProduce Perm = 1 << iota // Enqueue, EnqueueStream
	PermConsume                  // Lease, Ack, Nack, ExtendLease
	PermBrowse                   // Peek, GetQueue, ListQueues, ListConsumers
	PermManage                   // CreateQueue, UpdateQueue, DeleteQueue, PurgeQueue, Redrive

	AllPerms = PermProduce | PermConsume | PermBrowse | PermManage
)

var permNames = []struct {
	p    Perm
	name string
}{{PermProduce, "produce"}, {PermConsume, "consume"}, {PermBrowse, "browse"}, {PermManage, "manage"}}

// ParsePerm reads one permission name.
func ParsePerm(name string) (Perm, error) {
	for _, pn := range permNames {
		if pn.name == name {
			return pn.p, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown permission %q (produce, consume, browse, manage)", ErrInvalid, name)
}

// Names lists the permissions in p in a fixed order.
func (p Perm) Names() []string {
	var out []string
	for _, pn := range permNames {
		if p&pn.p != 0 {
			out = append(out, pn.name)
		}
	}
	return out
}

// String is p's names joined by commas.
func (p Perm) String() string { return strings.Join(p.Names(), ",") }

// Limits of auth names and patterns.
const (
	MaxIdentityLen = 128
	MaxPatternLen  = MaxQueueNameLen
	MaxGrants      = 256 // patterns per identity
	MaxTokens      = 10000
)

// ValidateIdentity checks an identity or token name: 1–128 characters of
// [A-Za-z0-9._@-] (a certificate's common name must fit this to be used).
func ValidateIdentity(name string) error {
	if name == "" || len(name) > MaxIdentityLen {
		return fmt.Errorf("%w: name must be 1-%d characters", ErrInvalid, MaxIdentityLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '@') {
			return fmt.Errorf("%w: name %q: only letters, digits and . _ - @", ErrInvalid, name)
		}
	}
	return nil
}

// ValidatePattern checks a queue name pattern: queue-name characters and
// '*', 1–255 characters.
func ValidatePattern(p string) error {
	if p == "" || len(p) > MaxPatternLen {
		return fmt.Errorf("%w: pattern must be 1-%d characters", ErrInvalid, MaxPatternLen)
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '*') {
			return fmt.Errorf("%w: pattern %q: only queue-name characters and *", ErrInvalid, p)
		}
	}
	return nil
}

// MatchPattern reports whether name matches pattern, where '*' matches any
// run of characters (dots included) and everything else itself. Greedy
// with backtracking to the last star: linear in practice, O(len²) at worst.
func MatchPattern(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Token is a stored bearer token: its hash, never the secret.
type Token struct {
	Name, Identity string
	Hash           [32]byte
	CreatedUnixMs  int64
	ExpiresUnixMs  int64 // 0 = never
}

// Expired reports whether the token is refused at wall-clock nowUnixMs.
func (t Token) Expired(nowUnixMs int64) bool {
	return t.ExpiresUnixMs != 0 && nowUnixMs >= t.ExpiresUnixMs
}

// PatternGrant is the permissions an identity holds on one pattern.
type PatternGrant struct {
	Pattern string
	Perms   Perm
}

// IdentityInfo is one identity as `raftq auth list` shows it.
type IdentityInfo struct {
	Name   string
	Admin  bool
	Tokens []Token // by name
	Grants []PatternGrant
}

type identity struct {
	admin  bool
	grants []PatternGrant // sorted by pattern
}

// Auth is the replicated identities, tokens and grants. A value is never
// changed once built (every change makes a new one), so a reader holding
// one needs no lock: the FSM publishes the current one after each batch.
type Auth struct {
	tokens map[string]Token    // by name
	byHash map[[32]byte]string // token hash → name
	idents map[string]identity
}

func newAuth() *Auth {
	return &Auth{tokens: map[string]Token{}, byHash: map[[32]byte]string{}, idents: map[string]identity{}}
}

// clone copies the maps (values are immutable) for a change.
func (a *Auth) clone() *Auth {
	return &Auth{tokens: maps.Clone(a.tokens), byHash: maps.Clone(a.byHash), idents: maps.Clone(a.idents)}
}

// Empty reports whether no token or grant exists.
func (a *Auth) Empty() bool { return len(a.tokens) == 0 && len(a.idents) == 0 }

// LookupToken finds a token by the SHA-256 of its secret.
func (a *Auth) LookupToken(hash [32]byte) (Token, bool) {
	name, ok := a.byHash[hash]
	if !ok {
		return Token{}, false
	}
	return a.tokens[name], true
}

// IsAdmin reports whether the identity holds the admin role.
func (a *Auth) IsAdmin(name string) bool { return a.idents[name].admin }

// Allowed reports whether the identity holds perm on queue (admins hold
// every permission on every queue).
func (a *Auth) Allowed(name string, perm Perm, queue string) bool {
	id, ok := a.idents[name]
	if !ok {
		return false
	}
	if id.admin {
		return true
	}
	for _, g := range id.grants {
		if g.Perms&perm == perm && MatchPattern(g.Pattern, queue) {
			return true
		}
	}
	return false
}

// Grants lists the identity's grants by pattern.
func (a *Auth) Grants(name string) []PatternGrant {
	return slices.Clone(a.idents[name].grants)
}

// Identities lists every identity that has a token, a grant or the admin
// role, by name.
func (a *Auth) Identities() []IdentityInfo {
	byName := map[string]*IdentityInfo{}
	get := func(n string) *IdentityInfo {
		if byName[n] == nil {
			byName[n] = &IdentityInfo{Name: n}
		}
		return byName[n]
	}
	for n, id := range a.idents {
		ii := get(n)
		ii.Admin, ii.Grants = id.admin, slices.Clone(id.grants)
	}
	for _, name := range slices.Sorted(maps.Keys(a.tokens)) {
		t := a.tokens[name]
		ii := get(t.Identity)
		ii.Tokens = append(ii.Tokens, t)
	}
	out := make([]IdentityInfo, 0, len(byName))
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[n])
	}
	return out
}

// Auth is the current auth state (immutable; see Auth).
func (s *Store) Auth() *Auth { return s.auth }

// Auth errors.
var (
	ErrTokenExists   = errors.New("token exists")
	ErrTokenNotFound = errors.New("token not found")
	ErrGrantNotFound = errors.New("grant not found")
)

// CreateToken stores a token's hash. An already expired token (by the
// entry's own stamp, the leader's clock when it proposed) is refused, so
// every replica decides alike.
func (tx *Tx) CreateToken(c *fsmv1.CreateToken) Result {
	a := tx.s.auth
	switch {
	case ValidateIdentity(c.GetName()) != nil:
		return failed(ValidateIdentity(c.GetName()))
	case ValidateIdentity(c.GetIdentity()) != nil:
		return failed(ValidateIdentity(c.GetIdentity()))
	case len(c.GetSha256()) != 32:
		return failed(fmt.Errorf("%w: sha256 must be 32 bytes", ErrInvalid))
	case c.GetExpiresUnixMs() < 0 || c.GetExpiresUnixMs() != 0 && c.GetExpiresUnixMs() <= tx.stampMs:
		return failed(fmt.Errorf("%w: token expires before it is created", ErrInvalid))
	}
	k, err := tx.writeKey(recentCreateToken, c.GetName(), c.GetIdempotencyKey())
	switch {
	case err != nil:
		return failed(err)
	case tx.repeat(k):
		return failed(fmt.Errorf("%w: token %s was created by this call's first attempt, whose answer was lost; its secret was only in that answer and is never stored: revoke %s and create it again",
			ErrAnswerLost, c.GetName(), c.GetName()))
	case len(a.tokens) >= MaxTokens:
		return failed(fmt.Errorf("%w: %d tokens exist", ErrLimit, MaxTokens))
	}
	if _, ok := a.tokens[c.Name]; ok {
		return failed(fmt.Errorf("%w: %s", ErrTokenExists, c.Name))
	}
	t := Token{Name: c.Name, Identity: c.Identity, CreatedUnixMs: tx.stampMs, ExpiresUnixMs: c.ExpiresUnixMs}
	copy(t.Hash[:], c.Sha256)
	if _, ok := a.byHash[t.Hash]; ok {
		// 256 random bits never collide; a replayed proposal might.
		return failed(fmt.Errorf("%w: token hash already stored", ErrTokenExists))
	}
	n := a.clone()
	n.tokens[t.Name] = t
	n.byHash[t.Hash] = t.Name
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// RevokeToken deletes a token by name.
func (tx *Tx) RevokeToken(c *fsmv1.RevokeToken) Result {
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
	t, ok := tx.s.auth.tokens[c.GetName()]
	if !ok {
		return failed(fmt.Errorf("%w: %s", ErrTokenNotFound, c.GetName()))
	}
	n := tx.s.auth.clone()
	delete(n.tokens, t.Name)
	delete(n.byHash, t.Hash)
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// AuthGrant adds permissions on a pattern (a union with what the identity
// holds there already), or the admin role.
func (tx *Tx) AuthGrant(c *fsmv1.AuthGrant) Result {
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
	id := tx.s.auth.idents[c.Identity]
	if c.GetAdmin() {
		if c.GetPattern() != "" || c.GetPerms() != 0 {
			return failed(fmt.Errorf("%w: an admin grant names no pattern or permissions", ErrInvalid))
		}
		id.admin = true
	} else {
		if err := ValidatePattern(c.GetPattern()); err != nil {
			return failed(err)
		}
		p := Perm(c.GetPerms())
		if p == 0 || p&^AllPerms != 0 {
			return failed(fmt.Errorf("%w: permissions %#x", ErrInvalid, c.GetPerms()))
		}
		grants := slices.Clone(id.grants)
		i, found := slices.BinarySearchFunc(grants, c.Pattern, func(g PatternGrant, p string) int { return strings.Compare(g.Pattern, p) })
		switch {
		case found:
			grants[i].Perms |= p
		case len(grants) >= MaxGrants:
			return failed(fmt.Errorf("%w: %d grants per identity", ErrLimit, MaxGrants))
		default:
			grants = slices.Insert(grants, i, PatternGrant{Pattern: c.Pattern, Perms: p})
		}
		id.grants = grants
	}
	n := tx.s.auth.clone()
	n.idents[c.Identity] = id
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// AuthUngrant removes the grant on a pattern, or the admin role.
func (tx *Tx) AuthUngrant(c *fsmv1.AuthUngrant) Result {
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
	id, ok := tx.s.auth.idents[c.GetIdentity()]
	if c.GetAdmin() {
		if c.GetPattern() != "" {
			return failed(fmt.Errorf("%w: an admin ungrant names no pattern", ErrInvalid))
		}
		if !ok || !id.admin {
			return failed(fmt.Errorf("%w: %s is not an admin", ErrGrantNotFound, c.GetIdentity()))
		}
		id.admin = false
	} else {
		i := -1
		if ok {
			i = slices.IndexFunc(id.grants, func(g PatternGrant) bool { return g.Pattern == c.GetPattern() })
		}
		if i < 0 {
			return failed(fmt.Errorf("%w: %s has no grant on %q", ErrGrantNotFound, c.GetIdentity(), c.GetPattern()))
		}
		id.grants = slices.Delete(slices.Clone(id.grants), i, i+1)
	}
	n := tx.s.auth.clone()
	if !id.admin && len(id.grants) == 0 {
		delete(n.idents, c.Identity)
	} else {
		n.idents[c.Identity] = id
	}
	tx.s.auth = n
	tx.done(k)
	return &Done{}
}

// record is the snapshot form of a: tokens by name, identities by name,
// grants by pattern, so equal states serialise to equal bytes.
func (a *Auth) record() *fsmv1.AuthRecord {
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

// loadAuth rebuilds an Auth from its snapshot record, checking it as the
// commands would have.
func loadAuth(rec *fsmv1.AuthRecord) (*Auth, error) {
	a := newAuth()
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
