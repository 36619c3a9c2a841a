package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/raftq/raftq/client"
)

// TLS is a CA and the certificates made from it with the binary's own
// `raftq cert` commands, for clusters that run with TLS (Node.UseTLS).
type TLS struct {
	Dir string
	// Token is the nodes' bootstrap token (in TokenFile), an admin's.
	Token string
	bin   string
}

// NewTLS makes a CA in dir with bin (`raftq cert init`).
func NewTLS(bin, dir string) (*TLS, error) {
	p := &TLS{Dir: dir, bin: bin}
	if err := p.run("init", "--dir", dir); err != nil {
		return nil, err
	}
	// With TLS a node wants a token (--auth token): every node accepts
	// this one as an admin's, and clients made by Dial show it.
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	p.Token = hex.EncodeToString(raw[:])
	if err := os.WriteFile(p.TokenFile(), []byte(p.Token+"\n"), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// TokenFile holds Token, the nodes' bootstrap (admin) token.
func (p *TLS) TokenFile() string { return filepath.Join(p.Dir, "bootstrap-token") }

func (p *TLS) run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.bin, append([]string{"cert"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("harness: raftq cert %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// CAFile is the CA certificate clients trust.
func (p *TLS) CAFile() string { return filepath.Join(p.Dir, "ca.pem") }

// NodeFlags issues node id's certificate for hosts and returns the
// `raftq serve` flags that use it.
func (p *TLS) NodeFlags(id string, hosts ...string) ([]string, error) {
	args := []string{"node", "--dir", p.Dir, "--name", id, "--force"}
	if len(hosts) > 0 {
		args = append(args, "--host", strings.Join(hosts, ","))
	}
	if err := p.run(args...); err != nil {
		return nil, err
	}
	return []string{"--tls-cert", filepath.Join(p.Dir, id+".pem"), "--tls-key", filepath.Join(p.Dir, id+"-key.pem"), "--tls-ca", p.CAFile(),
		"--bootstrap-token-file", p.TokenFile()}, nil
}

// Client issues a client certificate for name and returns its files.
func (p *TLS) Client(name string) (cert, key string, err error) {
	if err := p.run("client", "--dir", p.Dir, "--name", name, "--force"); err != nil {
		return "", "", err
	}
	return filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem"), nil
}

// ClientOptions connect a client that trusts the CA (no client
// certificate) and shows the bootstrap token.
func (p *TLS) ClientOptions() []client.Option {
	return []client.Option{client.WithTLS(p.CAFile(), "", ""), client.WithToken(p.Token)}
}

// UseTLS gives the node a certificate of p for the host it binds and
// starts it with TLS from its next Launch; clients made by Dial trust p.
func (n *Node) UseTLS(p *TLS) error {
	host, _, err := net.SplitHostPort(n.GRPC)
	if err != nil {
		return err
	}
	flags, err := p.NodeFlags(n.ID, host)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.Args = append(n.Args, flags...)
	n.TLS = p
	return nil
}

// Reload sends the node SIGHUP: it reloads its TLS material and gossip
// keys without a restart.
func (n *Node) Reload() error {
	pid, err := n.Pid()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGHUP)
}
