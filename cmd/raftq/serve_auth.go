package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"
	"github.com/spf13/pflag"
)

// authOptions are the authentication flags of `raftq serve`.
type authOptions struct {
	mode          string
	bootstrapFile string
	adminCN       string
	pprof         bool
}

func addAuthFlags(fl *pflag.FlagSet, o *authOptions) {
	fl.StringVar(&o.mode, "auth", "", "how clients authenticate: none, token (a bearer token or a client certificate) or mtls (a client certificate; its common name is the identity); default: token when TLS is on, else none")
	fl.StringVar(&o.bootstrapFile, "bootstrap-token-file", "", "file holding a token (one line) this node accepts as an admin's: the first admin, who creates the real tokens (raftq auth token create)")
	fl.StringVar(&o.adminCN, "admin-cn", "", "common name of a client certificate that holds the admin role")
	fl.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof on the HTTP port (to admins only when auth is on)")
}

// minBootstrapTokenLen keeps a guessable bootstrap token out: it is an
// admin credential on every node that reads it.
const minBootstrapTokenLen = 16

// config is the node's auth configuration from the flags (the host adds
// the replicated state it reads). tlsOn is whether the node serves TLS,
// which makes token auth the default.
func (o authOptions) config(tlsOn bool, log *slog.Logger) (auth.Config, error) {
	mode := auth.ModeNone
	if tlsOn {
		mode = auth.ModeToken
	}
	if o.mode != "" {
		m, err := auth.ParseMode(o.mode)
		if err != nil {
			return auth.Config{}, err
		}
		mode = m
	}
	cfg := auth.Config{Mode: mode, AdminCN: o.adminCN, Logger: log.With("component", "audit")}
	if o.bootstrapFile != "" {
		if mode != auth.ModeToken {
			return auth.Config{}, fmt.Errorf("--bootstrap-token-file needs --auth token (it is %s)", mode)
		}
		tok, err := readTokenFile(o.bootstrapFile)
		if err != nil {
			return auth.Config{}, fmt.Errorf("--bootstrap-token-file: %w", err)
		}
		if len(tok) < minBootstrapTokenLen {
			return auth.Config{}, fmt.Errorf("--bootstrap-token-file: the token is shorter than %d characters", minBootstrapTokenLen)
		}
		warnReadable(log, "bootstrap token file", o.bootstrapFile)
		cfg.BootstrapToken = tok
	}
	if o.adminCN != "" {
		if mode == auth.ModeNone {
			return auth.Config{}, fmt.Errorf("--admin-cn needs --auth token or mtls")
		}
		if err := fsm.ValidateIdentity(o.adminCN); err != nil {
			return auth.Config{}, fmt.Errorf("--admin-cn: %w", err)
		}
	}
	return cfg, nil
}

// readTokenFile reads a token file: the token on its first line, blanks
// around it ignored.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", fmt.Errorf("%s holds no token", path)
	}
	return tok, nil
}
