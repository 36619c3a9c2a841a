package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/tlsconfig/pki"
)

// newCertCmd makes the certificates a TLS cluster needs (docs/security.md):
// a CA, node certificates and client certificates, as PEM files in --dir.
func newCertCmd() *cobra.Command {
	cmd := group("cert", "Make a CA and node/client certificates for TLS (files in --dir)")
	// Each subcommand has its own variables: a shared one would take the
	// default of whichever subcommand defined its flag last.
	type common struct {
		dir      string
		force    bool
		validFor time.Duration
	}
	addCommon := func(c *cobra.Command, def time.Duration) *common {
		o := &common{}
		c.Flags().StringVar(&o.dir, "dir", "", "directory of ca.pem, ca-key.pem and NAME.pem, NAME-key.pem (required)")
		c.Flags().BoolVar(&o.force, "force", false, "replace existing files")
		c.Flags().DurationVar(&o.validFor, "valid-for", def, "lifetime of the certificate")
		_ = c.MarkFlagRequired("dir")
		return o
	}

	var initOpts *common
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Make a CA: DIR/ca.pem and DIR/ca-key.pem (keep the key off the nodes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := initOpts.dir
			ca, err := pki.NewCA("raftq CA", time.Now(), initOpts.validFor)
			if err != nil {
				return err
			}
			if err := ca.WriteCA(dir, initOpts.force); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (valid until %s)\n",
				filepath.Join(dir, pki.CAFile), filepath.Join(dir, pki.CAKeyFile), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	initOpts = addCommon(initCmd, pki.DefaultCAValidity)

	var (
		name  string
		hosts []string
	)
	issue := func(node bool, o *common) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			dir, force, validFor := o.dir, o.force, o.validFor
			ca, err := pki.LoadCA(dir)
			if err != nil {
				return err
			}
			now := time.Now()
			certPEM, keyPEM, err := ca.Issue(pki.Request{Name: name, Node: node, Hosts: hosts, NotAfter: now.Add(validFor)})
			if err != nil {
				return err
			}
			if err := pki.WritePair(dir, pki.CertFile(name), pki.KeyFile(name), certPEM, keyPEM, force); err != nil {
				return err
			}
			if ca.Cert.NotAfter.Before(now.Add(validFor)) {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the CA expires at %s, before this certificate would\n", ca.Cert.NotAfter.UTC().Format(time.RFC3339))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(dir, pki.CertFile(name)), filepath.Join(dir, pki.KeyFile(name)))
			return nil
		}
	}
	nodeCmd := &cobra.Command{
		Use:   "node",
		Short: "Make a node certificate DIR/NAME.pem (URI SAN raftq-node://NAME; server and client use)",
		Long: `Make a node certificate signed by DIR's CA. NAME must be the node's --node-id:
Raft and forwarding accept a peer only with the node certificate of the id
they expect. --host lists the addresses and DNS names clients use to reach
the node (loopback is always included).`,
		Args: cobra.NoArgs,
	}
	nodeOpts := addCommon(nodeCmd, pki.DefaultCertValidity)
	nodeCmd.RunE = issue(true, nodeOpts)
	nodeCmd.Flags().StringVar(&name, "name", "", "node id (required)")
	nodeCmd.Flags().StringSliceVar(&hosts, "host", nil, "comma-separated IP addresses and DNS names of the node")
	_ = nodeCmd.MarkFlagRequired("name")

	clientCmd := &cobra.Command{
		Use:   "client",
		Short: "Make a client certificate DIR/NAME.pem (CN=NAME; client use only, never a node)",
		Args:  cobra.NoArgs,
	}
	clientOpts := addCommon(clientCmd, pki.DefaultCertValidity)
	clientCmd.RunE = issue(false, clientOpts)
	clientCmd.Flags().StringVar(&name, "name", "", "client identity, the certificate's common name (required)")
	_ = clientCmd.MarkFlagRequired("name")

	// A secret printed to stdout and redirected (> file) lands in a file
	// of the umask's mode, 0644 as a rule: --out writes it 0600.
	secret := func(use, short, what string, gen func() (string, error)) *cobra.Command {
		var out string
		var force bool
		c := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if out != "" {
					if err := checkSecretOut(out, force); err != nil {
						return err
					}
				}
				s, err := gen()
				if err != nil {
					return err
				}
				if out == "" {
					_, err = fmt.Fprintln(cmd.OutOrStdout(), s)
					return err
				}
				if err := writeSecret(out, []byte(s+"\n"), force); err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s to %s (mode 0600)\n", what, out)
				return err
			},
		}
		c.Flags().StringVar(&out, "out", "", "write it to this file, mode 0600, instead of printing it")
		c.Flags().BoolVar(&force, "force", false, "with --out: replace an existing file")
		return c
	}
	gossipCmd := secret("gossip-key", "Print a new gossip key (base64, 32 random bytes) for a --gossip-key-file line, or write it with --out", "a gossip key",
		func() (string, error) {
			k := make([]byte, 32)
			if _, err := rand.Read(k); err != nil {
				return "", err
			}
			return base64.StdEncoding.EncodeToString(k), nil
		})
	tokenCmd := secret("bootstrap-token", "Print a new random token for raftq serve --bootstrap-token-file, or write it with --out", "a bootstrap token",
		newBootstrapToken)

	cmd.AddCommand(initCmd, nodeCmd, clientCmd, gossipCmd, tokenCmd, newCertClusterCmd())
	return cmd
}
