package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"slices"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func createToken(name, identity, secret string, expires int64) *fsmv1.Command {
	h := sha256.Sum256([]byte(secret))
	return &fsmv1.Command{Op: &fsmv1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{Name: name, Identity: identity, Sha256: h[:], ExpiresUnixMs: expires}}}
}

func authGrant(identity, pattern string, perms Perm, admin bool) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{Identity: identity, Pattern: pattern, Perms: uint32(perms), Admin: admin}}}
}

func authUngrant(identity, pattern string, admin bool) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_AuthUngrant{AuthUngrant: &fsmv1.AuthUngrant{Identity: identity, Pattern: pattern, Admin: admin}}}
}

// TestAuthCommandsNeedVersion5: before log version 5 the auth commands are
// unknown, exactly as older builds saw them, and change nothing.
func TestAuthCommandsNeedVersion5(t *testing.T) {
	h := newHarness(t)
	h.raise(4)
	before := stateDigest(t, h.f)
	for _, cmd := range []*fsmv1.Command{
		createToken("t", "alice", "s", 0), authGrant("alice", "q", PermProduce, false), authUngrant("alice", "q", false),
		{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: "t"}}},
	} {
		if r := h.apply(cmd); !errors.Is(r.Failure(), ErrInvalid) {
			t.Fatalf("%T in a version-4 entry: %v", cmd.Op, r.Failure())
		}
	}
	if stateDigest(t, h.f) != before || !h.f.Reader().Auth().Empty() {
		t.Fatal("an auth command of a version-4 entry changed the state")
	}
}

func TestAuthTokensAndGrants(t *testing.T) {
	h := newHarness(t)
	h.raise(HandoverVersion - 1) // the newest version whose log holds auth
	h.mustOK(createToken("alice-1", "alice", "secret-a", 0))
	h.mustOK(createToken("ci", "ci", "secret-ci", h.now+60_000))
	h.mustOK(authGrant("alice", "jobs.*", PermProduce|PermConsume, false))
	h.mustOK(authGrant("alice", "jobs.*", PermBrowse, false)) // a union
	h.mustOK(authGrant("root", "", 0, true))

	a := h.f.Reader().Auth()
	tok, ok := a.LookupToken(sha256.Sum256([]byte("secret-a")))
	if !ok || tok.Name != "alice-1" || tok.Identity != "alice" || tok.Expired(h.now+1e12) {
		t.Fatalf("token lookup: %+v %v", tok, ok)
	}
	if ci, _ := a.LookupToken(sha256.Sum256([]byte("secret-ci"))); !ci.Expired(h.now+60_000) || ci.Expired(h.now+59_999) {
		t.Fatalf("expiry of %+v", ci)
	}
	for _, c := range []struct {
		who   string
		perm  Perm
		queue string
		want  bool
	}{
		{"alice", PermProduce, "jobs.a", true},
		{"alice", PermBrowse, "jobs.a.b.dlq", true},
		{"alice", PermManage, "jobs.a", false},
		{"alice", PermProduce, "jobsx", false},
		{"alice", PermProduce, "other", false},
		{"root", PermManage, "anything", true},
		{"nobody", PermBrowse, "jobs.a", false},
	} {
		if got := a.Allowed(c.who, c.perm, c.queue); got != c.want {
			t.Errorf("Allowed(%s, %s, %s) = %v, want %v", c.who, c.perm, c.queue, got, c.want)
		}
	}

	// Refusals change nothing.
	before := stateDigest(t, h.f)
	for _, c := range []struct {
		cmd  *fsmv1.Command
		want error
	}{
		{createToken("alice-1", "alice", "other", 0), ErrTokenExists},
		{createToken("dup-hash", "bob", "secret-a", 0), ErrTokenExists},
		{createToken("late", "bob", "x", h.now), ErrInvalid}, // expired at its own stamp
		{createToken("bad name", "bob", "x", 0), ErrInvalid},
		{&fsmv1.Command{Op: &fsmv1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{Name: "short", Identity: "bob", Sha256: []byte{1}}}}, ErrInvalid},
		{&fsmv1.Command{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: "nope"}}}, ErrTokenNotFound},
		{authGrant("alice", "jobs.*", 0, false), ErrInvalid},
		{authGrant("alice", "jobs.*", 1<<7, false), ErrInvalid},
		{authGrant("alice", "jobs/x", PermProduce, false), ErrInvalid},
		{authGrant("alice", "q", PermProduce, true), ErrInvalid},
		{authUngrant("alice", "nope.*", false), ErrGrantNotFound},
		{authUngrant("alice", "", true), ErrGrantNotFound},
	} {
		if r := h.apply(c.cmd); !errors.Is(r.Failure(), c.want) {
			t.Errorf("%v: %v, want %v", c.cmd, r.Failure(), c.want)
		}
	}
	if stateDigest(t, h.f) != before {
		t.Fatal("a refused auth command changed the state")
	}

	// Snapshots carry the auth state; a restored replica has the same
	// digest and answers the same.
	r := restoredCopy(t, h)
	if stateDigest(t, r.f) != before {
		t.Fatal("restored replica's digest differs")
	}
	if got, want := r.f.Reader().Auth().Identities(), h.f.Reader().Auth().Identities(); !slices.EqualFunc(got, want, equalIdentity) {
		t.Fatalf("restored identities %+v, want %+v", got, want)
	}
	if snap := snapshotBytes(t, h.f); bytes.Contains(snap, []byte("secret-a")) {
		t.Fatal("a token secret reached the snapshot")
	}

	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: "alice-1"}}})
	if _, ok := h.f.Reader().Auth().LookupToken(sha256.Sum256([]byte("secret-a"))); ok {
		t.Fatal("revoked token still found")
	}
	h.mustOK(authUngrant("alice", "jobs.*", false))
	h.mustOK(authUngrant("root", "", true))
	if h.f.Reader().Auth().Allowed("alice", PermProduce, "jobs.a") || h.f.Reader().Auth().IsAdmin("root") {
		t.Fatal("ungrant left permissions")
	}
	if stateDigest(t, h.f) == before {
		t.Fatal("auth changes did not change the digest")
	}
	ids := h.f.Reader().Auth().Identities()
	if len(ids) != 1 || ids[0].Name != "ci" || len(ids[0].Tokens) != 1 {
		t.Fatalf("identities after revoke and ungrant: %+v", ids)
	}
}

func equalIdentity(a, b IdentityInfo) bool {
	return a.Name == b.Name && a.Admin == b.Admin && slices.Equal(a.Grants, b.Grants) && slices.Equal(a.Tokens, b.Tokens)
}

// TestLeaseTokenUnguessable: from log version 5 a lease token is the
// leader's random value carried in the grant; the index-derived token an
// attacker can compute from Status is refused, and so is a grant without
// a token. Version-4 entries keep the index-derived token.
func TestLeaseTokenUnguessable(t *testing.T) {
	h := newHarness(t)
	h.raise(4)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a", "b")
	old := h.grant("q", "c", 30_000, ids[0])[0]
	if old.LeaseToken != h.index<<20 {
		t.Fatalf("version-4 token %x, want index<<20 = %x", old.LeaseToken, h.index<<20)
	}
	h.raise(HandoverVersion - 1) // the newest version whose log holds auth
	d := h.grant("q", "c", 30_000, ids[1])[0]
	grantIndex := h.index
	before := stateDigest(t, h.f)
	for _, forged := range []uint64{grantIndex << 20, grantIndex<<20 | 1, 0} {
		res := as[*ItemsResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: []*fsmv1.Ref{{Queue: "q", MessageId: d.ID, LeaseToken: forged}}}}}))
		if !errors.Is(res.Items[0], ErrStaleLease) {
			t.Fatalf("ack with forged token %x: %v", forged, res.Items[0])
		}
	}
	if stateDigest(t, h.f) != before {
		t.Fatal("a forged ack changed the state")
	}
	h.ack(d)   // the real token works
	h.ack(old) // and the version-4 lease keeps its token
	ids = h.enqueuePayloads("q", "c")
	res := as[*GrantResult](t, h.apply(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{
		Grants: []*fsmv1.Grant{{Queue: "q", MessageId: ids[0], ConsumerId: "c", DeadlineMs: h.now + 10}}}}}))
	if !errors.Is(res.Items[0], ErrInvalid) {
		t.Fatalf("version-5 grant without a token: %v", res.Items[0])
	}
}

// stateDigest hashes the state without its applied index (which every
// entry, refused or not, moves), to tell whether a command changed it.
func stateDigest(t *testing.T, f *FSM) string {
	t.Helper()
	f.mu.Lock()
	fr := f.store.Freeze(0)
	f.mu.Unlock()
	d, err := fr.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
