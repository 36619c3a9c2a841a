package acl

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestMatchPattern(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"jobs", "jobs", true},
		{"jobs", "jobs2", false},
		{"jobs.*", "jobs.a", true},
		{"jobs.*", "jobs.a.b.dlq", true},
		{"jobs.*", "jobs", false},
		{"*", "anything", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"**", "x", true},
	} {
		if got := MatchPattern(c.pattern, c.name); got != c.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func hash(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// TestRules runs each change against a small state and checks the error
// each refusal carries and that a refusal leaves the state as it was.
func TestRules(t *testing.T) {
	a := New()
	must := func(n *Auth, err error) *Auth {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a = must(a.AddToken("t1", "alice", hash(1), 0, 100))
	a = must(a.Grant("alice", "jobs.*", uint32(PermProduce|PermConsume), false))
	a = must(a.Grant("root", "", 0, true))
	before := a.Record()
	for _, c := range []struct {
		name string
		do   func() (*Auth, error)
		want error
	}{
		{"token name taken", func() (*Auth, error) { return a.AddToken("t1", "bob", hash(2), 0, 100) }, ErrTokenExists},
		{"token hash taken", func() (*Auth, error) { return a.AddToken("t2", "bob", hash(1), 0, 100) }, ErrTokenExists},
		{"revoke unknown", func() (*Auth, error) { return a.RemoveToken("nope") }, ErrTokenNotFound},
		{"grant bad identity", func() (*Auth, error) { return a.Grant("a b", "x", 1, false) }, ErrInvalid},
		{"grant bad pattern", func() (*Auth, error) { return a.Grant("bob", "a/b", 1, false) }, ErrInvalid},
		{"grant no perms", func() (*Auth, error) { return a.Grant("bob", "x", 0, false) }, ErrInvalid},
		{"grant unknown perm bit", func() (*Auth, error) { return a.Grant("bob", "x", 1<<9, false) }, ErrInvalid},
		{"admin with pattern", func() (*Auth, error) { return a.Grant("bob", "x", 0, true) }, ErrInvalid},
		{"ungrant missing", func() (*Auth, error) { return a.Ungrant("alice", "other", false) }, ErrGrantNotFound},
		{"ungrant admin of non-admin", func() (*Auth, error) { return a.Ungrant("alice", "", true) }, ErrGrantNotFound},
	} {
		n, err := c.do()
		if !errors.Is(err, c.want) || n != nil {
			t.Errorf("%s: %v, %v; want %v", c.name, n, err, c.want)
		}
	}
	if !proto.Equal(a.Record(), before) {
		t.Fatal("a refused change changed the state")
	}
	if err := CheckToken("t", "x", hash(3), 50, 100); !errors.Is(err, ErrInvalid) {
		t.Errorf("expired token: %v", err)
	}
	if !a.Allowed("alice", PermProduce, "jobs.a") || a.Allowed("alice", PermManage, "jobs.a") || !a.Allowed("root", PermManage, "x") {
		t.Error("Allowed")
	}
	// Ungranting the last grant forgets the identity.
	b := must(a.Ungrant("alice", "jobs.*", false))
	if len(b.Grants("alice")) != 0 || len(a.Grants("alice")) != 1 {
		t.Error("ungrant changed the old value or left the grant")
	}
	// Record and Load round trip.
	l, err := Load(a.Record())
	if err != nil || !proto.Equal(l.Record(), a.Record()) {
		t.Fatalf("round trip: %v", err)
	}
	bad := a.Record()
	bad.Identities = append(bad.Identities, bad.Identities[0])
	if _, err := Load(bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("duplicate identity loaded: %v", err)
	}
}
