// Package acl holds the rules of raftq's replicated access control:
// identities, bearer tokens (their hashes only) and grants of queue
// permissions on name patterns, as an immutable value that every change
// replaces. It is shared by the queue state machine (fsm/state, which
// holds it up to the meta group) and the meta group's state machine
// (meta), so both apply the same rules to the same records; it imports
// only the log format and knows nothing of Raft, entries or callers.
package acl

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The sentinel errors of the rules. fsm/state uses ErrInvalid and
// ErrLimit as its own (the same values), so errors.Is matches whichever
// state machine raised them.
var (
	// ErrInvalid marks bad input (names, sizes, ranges).
	ErrInvalid = errors.New("invalid argument")
	// ErrLimit: a count limit of the state (tokens, grants) is reached.
	ErrLimit         = errors.New("limit reached")
	ErrTokenExists   = errors.New("token exists")
	ErrTokenNotFound = errors.New("token not found")
	ErrGrantNotFound = errors.New("grant not found")
)

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
	MaxPatternLen  = 255 // a queue name's limit
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
// one needs no lock: a state machine publishes the current one after each
// batch.
type Auth struct {
	tokens map[string]Token    // by name
	byHash map[[32]byte]string // token hash → name
	idents map[string]identity
}

// New returns an Auth with no token and no grant.
func New() *Auth {
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
