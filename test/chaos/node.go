//go:build linux

package chaos

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// Every node has an address of its own, so all use the same ports.
const (
	grpcPort   = 7400
	raftPort   = 7401
	gossipPort = 7402
	httpPort   = 7403
)

// Node is one raftq process (a harness.Node) running inside its host's
// namespace, started as `ip netns exec <ns> raftq serve ...` (ip execs the
// binary, so the process and its group are the node's own).
type Node struct {
	*harness.Node
	Host *Host
	// ClockFile holds the offset of the node's wall clock (the test-only
	// --test-clock-offset-file; the node re-reads it every 100 ms).
	ClockFile string
}

// SetClockOffset jumps the node's wall clock to d off the true one (the
// file is replaced whole, so the node never reads half of it).
func (n *Node) SetClockOffset(d time.Duration) error {
	tmp := n.ClockFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.ClockFile)
}

func newNode(bin, dir string, h *Host, join []string, n int, extra []string, sec *security, log *slog.Logger, onCrash func(NodeCrash)) (*Node, error) {
	id := fmt.Sprintf("n%d", h.Index+1)
	args := []string{"--bootstrap-expect", strconv.Itoa(n)}
	if sec == nil {
		// The hosts are network namespaces on a private bridge; the nodes
		// bind their addresses there, which a node refuses without TLS
		// unless told it is meant.
		args = append(args, "--insecure")
	} else {
		args = append(args, "--gossip-key-file", sec.gossipKeys)
	}
	clockFile := filepath.Join(dir, id+".clock-offset")
	args = append(args, "--test-clock-offset-file", clockFile)
	for _, j := range join {
		args = append(args, "--join", j)
	}
	log = log.With("node", id)
	var hn *harness.Node
	hn, err := harness.NewNode(harness.NodeConfig{
		ID: id, Bin: bin, Dir: filepath.Join(dir, id),
		Host:  h.IP,
		Ports: harness.Ports{GRPC: grpcPort, Raft: raftPort, Gossip: gossipPort, HTTP: httpPort},
		Wrap:  []string{"ip", "netns", "exec", h.NS},
		Env:   []string{"GORACE=halt_on_error=0"},
		Args:  append(args, extra...),
		OnExit: func(err error) {
			status := "exited"
			if err != nil {
				status = err.Error()
			}
			log.Error("node exited on its own", "status", status)
			onCrash(NodeCrash{Node: id, At: time.Now(), Status: status, Log: hn.LogTail(8 << 10)})
		},
	})
	if err != nil {
		return nil, err
	}
	if sec != nil {
		if err := hn.UseTLS(sec.tls); err != nil {
			return nil, err
		}
	}
	return &Node{Node: hn, Host: h, ClockFile: clockFile}, nil
}

// security is what a TLS cluster's nodes share: the CA and certificates
// (made with the binary's raftq cert) and a gossip keyring.
type security struct {
	tls        *harness.TLS
	gossipKeys string
}

func newSecurity(bin, dir string) (*security, error) {
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
		return nil, err
	}
	return &security{tls: p, gossipKeys: keys}, nil
}
