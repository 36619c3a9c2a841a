package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/tlsconfig/pki"
)

// newCertClusterCmd makes, in one run, what a TLS cluster's nodes need, and
// keeps whatever already exists: a container image without a shell can
// then prepare a deployment with one idempotent command (the init service
// of deploy/compose.yaml runs it on every `up`).
func newCertClusterCmd() *cobra.Command {
	var o struct {
		caDir, dir, tokenFile string
		gossipKeyFile         string
		nodes, clients, hosts []string
		validFor              time.Duration
	}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Make what a TLS cluster needs, keeping what exists: a CA, node and client certificates, a bootstrap token",
		Long: `Make, once, what the nodes of a TLS cluster need, and keep whatever already
exists (so it can run before every start):
  --ca-dir: the CA (ca.pem, ca-key.pem), made if missing;
  --dir:    the CA's certificate (ca.pem, without its key), a node certificate
            NAME.pem / NAME-key.pem for each --node (its DNS names: NAME and
            every --host; loopback is always included), a client certificate
            for each --client;
  --bootstrap-token-file: a random token (one line, mode 0600) for
            raftq serve --bootstrap-token-file and clients' --token-file;
  --gossip-key-file: a random 32-byte gossip key (base64, one line, mode
            0600) for raftq serve --gossip-key-file.
Keep --ca-dir apart from what the nodes mount: its key signs certificates.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			ca, made, err := loadOrMakeCA(o.caDir)
			if err != nil {
				return err
			}
			report(out, made, filepath.Join(o.caDir, pki.CAFile))
			made, err = writeIfMissing(filepath.Join(o.dir, pki.CAFile), ca.CertPEM, 0o644, true)
			if err != nil {
				return err
			}
			report(out, made, filepath.Join(o.dir, pki.CAFile))
			issue := func(name string, node bool) error {
				path := filepath.Join(o.dir, pki.CertFile(name))
				if _, err := os.Stat(path); err == nil {
					report(out, false, path)
					return nil
				}
				req := pki.Request{Name: name, Node: node, NotAfter: time.Now().Add(o.validFor)}
				if node {
					req.Hosts = append([]string{name}, o.hosts...)
				}
				certPEM, keyPEM, err := ca.Issue(req)
				if err != nil {
					return err
				}
				if err := pki.WritePair(o.dir, pki.CertFile(name), pki.KeyFile(name), certPEM, keyPEM, true); err != nil {
					return err
				}
				report(out, true, path)
				return nil
			}
			for _, n := range o.nodes {
				if err := issue(n, true); err != nil {
					return err
				}
			}
			for _, c := range o.clients {
				if err := issue(c, false); err != nil {
					return err
				}
			}
			if o.tokenFile != "" {
				tok, err := newBootstrapToken()
				if err != nil {
					return err
				}
				made, err := writeIfMissing(o.tokenFile, []byte(tok+"\n"), 0o600, false)
				if err != nil {
					return err
				}
				report(out, made, o.tokenFile)
			}
			if o.gossipKeyFile != "" {
				key := make([]byte, 32)
				if _, err := rand.Read(key); err != nil {
					return err
				}
				made, err := writeIfMissing(o.gossipKeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600, false)
				if err != nil {
					return err
				}
				report(out, made, o.gossipKeyFile)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.caDir, "ca-dir", "", "directory of the CA and its key (required)")
	fl.StringVar(&o.dir, "dir", "", "directory of the nodes' and clients' files (required)")
	fl.StringSliceVar(&o.nodes, "node", nil, "node id to make a node certificate for (repeat or comma-separate)")
	fl.StringSliceVar(&o.clients, "client", nil, "client identity to make a client certificate for (repeat or comma-separate)")
	fl.StringSliceVar(&o.hosts, "host", nil, "extra IP addresses and DNS names for every node certificate")
	fl.StringVar(&o.tokenFile, "bootstrap-token-file", "", "file to hold a random bootstrap token (made if missing)")
	fl.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "file to hold a random gossip encryption key (made if missing)")
	fl.DurationVar(&o.validFor, "valid-for", pki.DefaultCertValidity, "lifetime of the node and client certificates made")
	_ = cmd.MarkFlagRequired("ca-dir")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func report(w io.Writer, made bool, path string) {
	verb := "kept"
	if made {
		verb = "made"
	}
	fmt.Fprintf(w, "%s %s\n", verb, path)
}

// loadOrMakeCA loads the CA in dir, or makes one there if it has none.
func loadOrMakeCA(dir string) (*pki.CA, bool, error) {
	_, certErr := os.Stat(filepath.Join(dir, pki.CAFile))
	_, keyErr := os.Stat(filepath.Join(dir, pki.CAKeyFile))
	if certErr == nil || keyErr == nil {
		ca, err := pki.LoadCA(dir)
		return ca, false, err
	}
	ca, err := pki.NewCA("raftq CA", time.Now(), pki.DefaultCAValidity)
	if err != nil {
		return nil, false, err
	}
	return ca, true, ca.WriteCA(dir, false)
}

// writeFileAtomic writes data to path with mode, whatever the umask,
// through a temporary file beside it, fsync and rename, so a reader (a
// node reloading a key or certificate) never sees half of it.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op after the rename
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeIfMissing writes data to path (atomically, with mode) unless the
// file exists; with same, an existing file must hold data (a CA
// certificate from another CA would make every node refuse the others).
func writeIfMissing(path string, data []byte, mode fs.FileMode, same bool) (bool, error) {
	have, err := os.ReadFile(path)
	if err == nil {
		if same && !bytes.Equal(have, data) {
			return false, fmt.Errorf("%s holds another CA's certificate than the one in --ca-dir; remove it, or the certificates beside it, to start again", path)
		}
		return false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	if err := writeFileAtomic(path, data, mode); err != nil {
		return false, err
	}
	return true, nil
}
