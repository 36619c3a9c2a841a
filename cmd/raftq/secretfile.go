package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
)

// checkSecretOut refuses an --out file that exists unless force: a secret
// is made once (a bearer token is shown only then), so the check comes
// before it is made.
func checkSecretOut(path string, force bool) error {
	if force {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("--out %s exists; give --force to replace it", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// writeSecret writes data to path with mode 0600, whatever the umask:
// atomically (a temporary file beside it, then a rename), so a node that
// reloads the file never reads half of it. Without force an existing file
// is refused.
func writeSecret(path string, data []byte, force bool) error {
	if err := checkSecretOut(path, force); err != nil {
		return err
	}
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// warnReadable logs a warning when the secret file at path can be read by
// users other than its owner (group or world bits).
func warnReadable(log *slog.Logger, what, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the "+what+" can be read by other users; make it mode 0600", "file", path, "mode", fi.Mode().Perm().String())
	}
}

// newBootstrapToken is a random token for --bootstrap-token-file: 256
// bits, hex (what raftq cert cluster and cert bootstrap-token make).
func newBootstrapToken() (string, error) {
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	return hex.EncodeToString(tok), nil
}
