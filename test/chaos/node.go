//go:build linux

package chaos

import (
	"fmt"
	"log/slog"
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
}

func newNode(bin, dir string, h *Host, join []string, n int, extra []string, log *slog.Logger, onCrash func(NodeCrash)) (*Node, error) {
	id := fmt.Sprintf("n%d", h.Index+1)
	// The hosts are network namespaces on a private bridge; the nodes
	// bind their addresses there, which a node refuses without TLS unless
	// told it is meant.
	args := []string{"--bootstrap-expect", strconv.Itoa(n), "--insecure"}
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
	return &Node{Node: hn, Host: h}, nil
}
