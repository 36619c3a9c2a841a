package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// Every command that makes a secret can write it to a file itself, mode
// 0600 whatever the umask, where `> file` would leave it 0644; an existing
// file is kept unless --force.
func TestSecretsWrittenWithOut(t *testing.T) {
	dir := t.TempDir()
	addr := serve(t, &fake{})
	for _, tc := range []struct {
		name  string
		args  []string // --out FILE is appended
		check func(path string) error
	}{
		{"gossip key", []string{"cert", "gossip-key"}, func(p string) error { _, err := readGossipKeys(p, slogDiscard()); return err }},
		{"bootstrap token", []string{"cert", "bootstrap-token"}, func(p string) error {
			tok, err := readTokenFile(p)
			if err == nil && len(tok) < minBootstrapTokenLen {
				t.Errorf("bootstrap token %d characters, want at least %d", len(tok), minBootstrapTokenLen)
			}
			return err
		}},
		{"bearer token", []string{"--addr", addr, "auth", "token", "create", "ci"}, func(p string) error {
			tok, err := readTokenFile(p)
			if err == nil && tok != "rqt_secret" {
				t.Errorf("token file holds %q", tok)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			args := append(append([]string{}, tc.args...), "--out", path)
			r := runArgs(t, args...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s is mode %v, want 0600", path, fi.Mode().Perm())
			}
			if err := tc.check(path); err != nil {
				t.Fatalf("%s does not hold a usable secret: %v", path, err)
			}
			before, _ := os.ReadFile(path)
			if strings.Contains(r.stdout, strings.TrimSpace(string(before))) {
				t.Fatalf("the secret was printed too: %q", r.stdout)
			}
			r = runArgs(t, args...)
			after, _ := os.ReadFile(path)
			if r.code == 0 || !strings.Contains(r.stderr, "--force") || !bytes.Equal(before, after) {
				t.Fatalf("an existing %s was not kept: exit %d, stderr %q", path, r.code, r.stderr)
			}
			if r := runArgs(t, append(args, "--force")...); r.code != 0 {
				t.Fatalf("--force: exit %d: %s", r.code, r.stderr)
			}
			if after, _ := os.ReadFile(path); bytes.Equal(before, after) && tc.name != "bearer token" {
				t.Fatalf("--force did not replace %s", path)
			}
		})
	}
}

// A token create whose --out file exists is refused before the token is
// made: the token is shown only once, so it must not be made and lost.
func TestTokenCreateOutRefusedBeforeTheCall(t *testing.T) {
	f := &fake{}
	path := filepath.Join(t.TempDir(), "ci.token")
	if err := os.WriteFile(path, []byte("rqt_old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := raftq(t, serve(t, f), "", "auth", "token", "create", "ci", "--out", path)
	if r.code == 0 || len(requests[*raftqv1.CreateTokenRequest](f)) != 0 {
		t.Fatalf("exit %d, %d CreateToken calls; want a refusal before any", r.code, len(requests[*raftqv1.CreateTokenRequest](f)))
	}
}

// The node warns about a gossip key file other users can read, as it does
// about the bootstrap token file, at start and at each reload.
func TestGossipKeyFileModeWarning(t *testing.T) {
	dir := t.TempDir()
	key := runArgs(t, "cert", "gossip-key").stdout
	for _, mode := range []os.FileMode{0o644, 0o640, 0o600} {
		path := filepath.Join(dir, "keys-"+mode.String())
		if err := os.WriteFile(path, []byte(key), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := readGossipKeys(path, slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "the gossip key file can be read by other users")
		if warned != (mode&0o077 != 0) {
			t.Errorf("mode %v: warned %t; log: %s", mode, warned, buf.String())
		}
	}
}
