package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func (f *fake) CreateToken(_ context.Context, r *raftqv1.CreateTokenRequest) (*raftqv1.CreateTokenResponse, error) {
	f.record(r)
	id := r.GetIdentity()
	if id == "" {
		id = r.GetName()
	}
	var expires int64
	if r.GetExpiresInMs() > 0 {
		expires = 1_800_000_000_000 + r.GetExpiresInMs()
	}
	return &raftqv1.CreateTokenResponse{Name: r.GetName(), Identity: id, Token: "rqt_secret", ExpiresUnixMs: expires}, nil
}

func (f *fake) RevokeToken(_ context.Context, r *raftqv1.RevokeTokenRequest) (*raftqv1.RevokeTokenResponse, error) {
	f.record(r)
	return &raftqv1.RevokeTokenResponse{}, nil
}

func (f *fake) Grant(_ context.Context, r *raftqv1.GrantRequest) (*raftqv1.GrantResponse, error) {
	f.record(r)
	return &raftqv1.GrantResponse{}, nil
}

func (f *fake) Ungrant(_ context.Context, r *raftqv1.UngrantRequest) (*raftqv1.UngrantResponse, error) {
	f.record(r)
	return &raftqv1.UngrantResponse{}, nil
}

func (f *fake) ListAuth(_ context.Context, r *raftqv1.ListAuthRequest) (*raftqv1.ListAuthResponse, error) {
	f.record(r)
	return &raftqv1.ListAuthResponse{Identities: []*raftqv1.IdentityInfo{
		{Name: "alice", Tokens: []*raftqv1.TokenInfo{{Name: "alice-1"}}, Grants: []*raftqv1.PermissionGrant{{Pattern: "jobs.*", Allow: []string{"produce", "consume"}}}},
		{Name: "root", Admin: true},
	}}, nil
}

func TestAuthTokenCreatePrintsOnlyTheToken(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	r := raftq(t, addr, "", "auth", "token", "create", "ci", "--expires", "720h", "--identity", "builder")
	if r.code != 0 || r.stdout != "rqt_secret\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	reqs := requests[*raftqv1.CreateTokenRequest](f)
	if len(reqs) != 1 || reqs[0].Name != "ci" || reqs[0].Identity != "builder" || reqs[0].ExpiresInMs != (720*time.Hour).Milliseconds() {
		t.Fatalf("requests %v", reqs)
	}
	r = raftq(t, addr, "", "--json", "auth", "token", "create", "ci", "--expires", "1h")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out["name"] != "ci" || out["token"] != "rqt_secret" {
		t.Fatalf("--json output %q: %v", r.stdout, err)
	}
	// The one JSON encoding (protojson, proto field names): a 64-bit
	// number is a string, as in every other command's --json and /status.
	if out["expires_unix_ms"] != "1800003600000" {
		t.Fatalf("--json expires_unix_ms = %#v, want the string \"1800003600000\" (protojson): %q", out["expires_unix_ms"], r.stdout)
	}
}

func TestAuthGrantArguments(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	for _, tc := range []struct {
		args    []string
		wantErr string
		want    *raftqv1.GrantRequest
	}{
		{[]string{"alice", "--queue", "jobs.*", "--allow", "produce,consume"}, "", &raftqv1.GrantRequest{Identity: "alice", Pattern: "jobs.*", Allow: []string{"produce", "consume"}}},
		{[]string{"root", "--admin"}, "", &raftqv1.GrantRequest{Identity: "root", Admin: true}},
		{[]string{"alice", "--queue", "jobs.*"}, "--allow", nil},
		{[]string{"alice", "--admin", "--queue", "x"}, "--admin takes no", nil},
	} {
		before := len(requests[*raftqv1.GrantRequest](f))
		r := raftq(t, addr, "", append([]string{"auth", "grant"}, tc.args...)...)
		reqs := requests[*raftqv1.GrantRequest](f)
		if tc.wantErr != "" {
			if r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) || len(reqs) != before {
				t.Errorf("%v: exit %d, stderr %q", tc.args, r.code, r.stderr)
			}
			continue
		}
		if r.code != 0 || len(reqs) != before+1 {
			t.Fatalf("%v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		got := reqs[len(reqs)-1]
		if got.Identity != tc.want.Identity || got.Pattern != tc.want.Pattern || !slices.Equal(got.Allow, tc.want.Allow) || got.Admin != tc.want.Admin ||
			got.GetIdempotencyKey() == "" { // set by the SDK, so a retry changes nothing more
			t.Errorf("%v: sent %v, want %v", tc.args, got, tc.want)
		}
	}
	if r := raftq(t, addr, "", "auth", "ungrant", "alice"); r.code == 0 {
		t.Error("ungrant without --queue or --admin succeeded")
	}
	if r := raftq(t, addr, "", "auth", "ungrant", "alice", "--queue", "jobs.*"); r.code != 0 || len(requests[*raftqv1.UngrantRequest](f)) != 1 {
		t.Errorf("ungrant: %d %s", r.code, r.stderr)
	}
}

func TestAuthListShowsNamesNotTokens(t *testing.T) {
	addr := serve(t, &fake{})
	r := raftq(t, addr, "", "auth", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "alice-1") || !strings.Contains(r.stdout, "jobs.*=produce,consume") || !strings.Contains(r.stdout, "root") {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestTokenFlags: the token reaches the node as `authorization: Bearer`,
// from --token, --token-file or RAFTQ_TOKEN, in that order.
func TestTokenFlags(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	file := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(file, []byte("  from-file \nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run1 := func(env string, args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		getenv := func(k string) string {
			if k == "RAFTQ_TOKEN" {
				return env
			}
			return ""
		}
		code := run(ctx, append([]string{"--addr", addr, "--rpc-timeout", "3s"}, args...), strings.NewReader(""), &out, &errOut, getenv)
		return result{code, out.String(), errOut.String()}
	}
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", nil, ""},
		{"from-env", nil, "Bearer from-env"},
		{"from-env", []string{"--token", "from-flag"}, "Bearer from-flag"},
		{"from-env", []string{"--token-file", file}, "Bearer from-file"},
	} {
		f.mu.Lock()
		f.authz = nil
		f.mu.Unlock()
		if r := run1(tc.env, append(tc.args, "queue", "list")...); r.code != 0 {
			t.Fatalf("%v: %s", tc.args, r.stderr)
		}
		f.mu.Lock()
		got := slices.Clone(f.authz)
		f.mu.Unlock()
		if len(got) == 0 || got[len(got)-1] != tc.want {
			t.Errorf("env %q args %v: authorization %q, want %q", tc.env, tc.args, got, tc.want)
		}
	}
	if r := run1("", "--token", "a", "--token-file", file, "queue", "list"); r.code == 0 || !strings.Contains(r.stderr, "not both") {
		t.Errorf("both flags: %d %s", r.code, r.stderr)
	}
}

func TestServeAuthFlags(t *testing.T) {
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	_ = os.WriteFile(good, []byte("rqt_0123456789abcdef0123\n"), 0o600)
	_ = os.WriteFile(short, []byte("abc\n"), 0o600)
	log := slogDiscard()
	for _, tc := range []struct {
		o       authOptions
		tlsOn   bool
		want    string
		wantErr string
	}{
		{authOptions{}, false, "none", ""},
		{authOptions{}, true, "token", ""},
		{authOptions{mode: "mtls", adminCN: "ops"}, false, "mtls", ""},
		{authOptions{mode: "token", bootstrapFile: good}, false, "token", ""},
		{authOptions{mode: "bogus"}, false, "", "want none, token or mtls"},
		{authOptions{bootstrapFile: good}, false, "", "needs --auth token"},
		{authOptions{mode: "token", bootstrapFile: short}, false, "", "shorter than"},
		{authOptions{mode: "token", bootstrapFile: filepath.Join(dir, "missing")}, false, "", "no such file"},
		{authOptions{adminCN: "ops"}, false, "", "--admin-cn needs"},
		{authOptions{mode: "mtls", adminCN: "o p"}, false, "", "--admin-cn"},
	} {
		a, err := tc.o.config(tc.tlsOn, log)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: %v, want an error with %q", tc.o, err, tc.wantErr)
			}
		case err != nil || string(a.Mode) != tc.want:
			t.Errorf("%+v: %v, %v; want mode %s", tc.o, a, err, tc.want)
		}
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// An auth change returns once every reachable node has applied it: a
// follower checks credentials against its own state, so a script's grant
// then use through a lagging follower would be refused.
func TestAuthChangesWaitForEveryNode(t *testing.T) {
	node := func(id, state string, applied uint64) *raftqv1.Node {
		return &raftqv1.Node{Id: id, State: state, AppliedIndex: applied}
	}
	f := &fake{statuses: []*raftqv1.StatusResponse{
		{Nodes: []*raftqv1.Node{node("n1", "leader", 10), node("n2", "follower", 8), node("n3", "unreachable", 0)}},
		{Nodes: []*raftqv1.Node{node("n1", "leader", 11), node("n2", "follower", 9), node("n3", "unreachable", 0)}},
		{Nodes: []*raftqv1.Node{node("n1", "leader", 12), node("n2", "follower", 10), node("n3", "unreachable", 0)}},
	}}
	r := raftq(t, serve(t, f), "", "auth", "grant", "ci", "--queue", "jobs.*", "--allow", "produce")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// n2 reached n1's index 10 at the third answer; the unreachable n3
	// is not waited for, nor the leader's later writes.
	if n := len(requests[*raftqv1.StatusRequest](f)); n != 3 {
		t.Fatalf("%d Status calls, want 3 (until n2 applied index 10)", n)
	}
}
