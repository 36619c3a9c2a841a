package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/raftq/raftq/client"
)

// clientCreds are the credential flags every client command shares. They
// are read in one place (clientOptions), so another kind of credential is
// one more field and one more option there.
type clientCreds struct {
	tlsCA, tlsCert, tlsKey string
}

// clientCredFlags names each flag and the environment variable read when
// it is not given. The variables are RAFTQ_CLIENT_*, not RAFTQ_TLS_*, so a
// shell in a node's container does not present the node's own
// certificate as a client.
var clientCredFlags = []struct{ flag, env, usage string }{
	{"tls-ca", "RAFTQ_CLIENT_TLS_CA", "CA (PEM) that signed the nodes' certificates: connect with TLS (env RAFTQ_CLIENT_TLS_CA)"},
	{"tls-cert", "RAFTQ_CLIENT_TLS_CERT", "client certificate (PEM) for mutual TLS (env RAFTQ_CLIENT_TLS_CERT)"},
	{"tls-key", "RAFTQ_CLIENT_TLS_KEY", "key of --tls-cert (env RAFTQ_CLIENT_TLS_KEY)"},
}

func (c *clientCreds) field(flag string) *string {
	switch flag {
	case "tls-ca":
		return &c.tlsCA
	case "tls-cert":
		return &c.tlsCert
	default:
		return &c.tlsKey
	}
}

func addClientCredFlags(pf *pflag.FlagSet, c *clientCreds) {
	for _, f := range clientCredFlags {
		pf.StringVar(c.field(f.flag), f.flag, "", f.usage)
	}
}

// clientOptions turns the credential flags (or their environment
// variables) into SDK options.
func (a *app) clientOptions(cmd *cobra.Command) []client.Option {
	c := a.creds
	for _, f := range clientCredFlags {
		p := c.field(f.flag)
		if fl := cmd.Flags().Lookup(f.flag); (fl == nil || !fl.Changed) && a.getenv != nil {
			if v := a.getenv(f.env); v != "" {
				*p = v
			}
		}
	}
	a.usedCA = c.tlsCA
	var opts []client.Option
	if c.tlsCA != "" || c.tlsCert != "" || c.tlsKey != "" {
		opts = append(opts, client.WithTLS(c.tlsCA, c.tlsCert, c.tlsKey))
	}
	return opts
}
