package systems

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/test/harness"
)

// benchIdentity is the identity the secure system's producers and
// consumers authenticate as: an ordinary token with grants on the bench
// queues, not the bootstrap admin token, so every call pays for the token
// lookup and the grant match a real client's call pays for.
const (
	benchIdentity = "bench"
	benchPattern  = "bench-*"
)

// secureNote says, in the results, what the secure system secures.
const secureNote = "secure: TLS on gRPC, HTTP and forwarding, mutual TLS on Raft, encrypted gossip (--gossip-key-file), " +
	"--auth token; producers and consumers dial over TLS with a token of identity \"" + benchIdentity +
	"\" granted produce,consume on " + benchPattern

// security is what the nodes of a secure cluster share: a CA and node
// certificates made with the binary's own `raftq cert`, a bootstrap
// (admin) token and a gossip keyring.
type security struct {
	tls        *harness.TLS
	gossipKeys string
	// token is the bench identity's, once benchIdentity made it.
	token string
}

func newSecurity(bin, dir string) (*security, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftq secure: %w", err)
	}
	p, err := harness.NewTLS(bin, dir)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	keys := filepath.Join(dir, "gossip.keys")
	if err := os.WriteFile(keys, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("raftq secure: %w", err)
	}
	return &security{tls: p, gossipKeys: keys}, nil
}

// secure gives node a certificate for its address, the bootstrap token
// and the gossip keyring, and names the auth mode (token, the default with
// TLS) so the figures do not silently change with the default.
func (s *security) secure(node *harness.Node) error {
	if err := node.UseTLS(s.tls); err != nil {
		return err
	}
	node.Args = append(node.Args, "--gossip-key-file", s.gossipKeys, "--auth", "token")
	return nil
}

// benchIdentity makes, through the driver's admin client, a token for the
// bench identity with produce and consume on the bench queues, and gives
// it to the driver's producers and consumers.
func (s *security) benchIdentity(ctx context.Context, d *RaftqDriver) error {
	admin := d.Admin()
	tok, err := admin.CreateToken(ctx, benchIdentity, benchIdentity, 0)
	if err != nil {
		return fmt.Errorf("raftq secure: create the bench token: %w", err)
	}
	if err := admin.Grant(ctx, benchIdentity, benchPattern, "produce", "consume"); err != nil {
		return fmt.Errorf("raftq secure: grant the bench identity: %w", err)
	}
	s.token = tok.GetToken()
	d.clientOpts = []client.Option{client.WithTLS(s.tls.CAFile(), "", ""), client.WithToken(s.token)}
	return nil
}
