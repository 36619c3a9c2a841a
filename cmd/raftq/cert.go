package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/transport/tlsconfig/pki"
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

	gossipCmd := &cobra.Command{
		Use:   "gossip-key",
		Short: "Print a new gossip key (base64, 32 random bytes) for a --gossip-key-file line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k := make([]byte, 32)
			if _, err := rand.Read(k); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(k))
			return nil
		},
	}

	cmd.AddCommand(initCmd, nodeCmd, clientCmd, gossipCmd, newCertClusterCmd())
	return cmd
}
