package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// StopTimeout is how long a graceful stop may take before the process is
// killed, unless a caller says otherwise.
const StopTimeout = 30 * time.Second

// Ports are a node's four listening ports.
type Ports struct{ GRPC, Raft, Gossip, HTTP int }

// NodeConfig says how to run one `raftq serve`.
type NodeConfig struct {
	ID  string
	Bin string
	// Dir is the node's own directory: its data dir is Dir/data and its
	// log Dir/<ID>.log. It is created if missing and kept across restarts.
	Dir string
	// Host is the address the node binds, with Ports; empty means
	// 127.0.0.1 on four free ports (FreePorts).
	Host  string
	Ports Ports
	// Wrap is put before the binary, e.g. `ip netns exec <ns>` (which
	// execs the binary, so the process and its group stay the node's).
	Wrap []string
	Env  []string // added to the environment
	Args []string // extra serve flags
	// OnExit hears of exits nobody asked for (see Command.OnExit).
	OnExit func(err error)
}

// Node is one raftq process with its own ports and data dir. It can be
// started again after Kill or Stop, on the same data dir and ports.
type Node struct {
	ID                       string
	GRPC, Raft, Gossip, HTTP string // host:port
	DataDir                  string
	LogPath                  string
	Args                     []string // extra serve flags; may be changed while stopped
	// TLS is set by UseTLS: the node serves TLS with a certificate of
	// this CA.
	TLS *TLS
	// Token is set by UseBootstrapToken: the admin token the node
	// accepts, which clients made by Dial show.
	Token string

	bin    string
	wrap   []string
	env    []string
	onExit func(error)
	t      testing.TB // set by TestNode, for Start

	mu   sync.Mutex
	proc *Process
}

// NewNode prepares (does not start) a node. Nothing cleans it up by
// itself: the caller must Kill or Stop it and remove cfg.Dir (TestNode
// does both for a test).
func NewNode(cfg NodeConfig) (*Node, error) {
	host, ports := cfg.Host, cfg.Ports
	if host == "" {
		p, err := FreePorts(4)
		if err != nil {
			return nil, fmt.Errorf("harness: ports for %s: %w", cfg.ID, err)
		}
		host, ports = "127.0.0.1", Ports{p[0], p[1], p[2], p[3]}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	addr := func(port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
	return &Node{
		ID:   cfg.ID,
		GRPC: addr(ports.GRPC), Raft: addr(ports.Raft), Gossip: addr(ports.Gossip), HTTP: addr(ports.HTTP),
		DataDir: filepath.Join(cfg.Dir, "data"),
		LogPath: filepath.Join(cfg.Dir, cfg.ID+".log"),
		Args:    slices.Clone(cfg.Args),
		bin:     cfg.Bin, wrap: cfg.Wrap, env: cfg.Env, onExit: cfg.OnExit,
	}, nil
}

// SetBin makes later starts run bin (a rolling upgrade swaps the binary
// of a stopped node); the running process, if any, is not affected.
func (n *Node) SetBin(bin string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bin = bin
}

// Launch starts the process; it is an error if it runs. Launching again
// after Kill or Stop restarts the node on the same data dir and ports.
func (n *Node) Launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && n.proc.Running() {
		return fmt.Errorf("harness: node %s already running", n.ID)
	}
	argv := append(slices.Clone(n.wrap), n.bin, "serve",
		"--node-id", n.ID, "--data-dir", n.DataDir,
		"--grpc-addr", n.GRPC, "--raft-addr", n.Raft, "--gossip-addr", n.Gossip, "--http-addr", n.HTTP)
	argv = append(argv, n.Args...)
	p, err := StartProcess(Command{Name: n.ID, Argv: argv, Env: n.env, LogPath: n.LogPath, OnExit: n.onExit})
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// Start launches the process of a node made by TestNode, failing the
// test if it cannot.
func (n *Node) Start() {
	if n.t == nil {
		panic("harness: Start needs a node from TestNode; use Launch")
	}
	n.t.Helper()
	if err := n.Launch(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *Node) process() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Kill is kill -9 of the node; it returns once the process has exited.
func (n *Node) Kill() {
	if p := n.process(); p != nil {
		p.Kill()
	}
}

// Stop sends SIGTERM (a graceful leave) and waits up to timeout before
// killing the node; the error says it had to.
func (n *Node) Stop(timeout time.Duration) error {
	if p := n.process(); p != nil {
		return p.Stop(timeout)
	}
	return nil
}

// Pause stops the node's process group (SIGSTOP).
func (n *Node) Pause() error {
	if p := n.process(); p != nil {
		return p.Pause()
	}
	return fmt.Errorf("%w: %s", ErrNotRunning, n.ID)
}

// Resume continues a paused node (SIGCONT).
func (n *Node) Resume() error {
	if p := n.process(); p != nil {
		return p.Resume()
	}
	return fmt.Errorf("%w: %s", ErrNotRunning, n.ID)
}

// Running reports whether the process is up (paused counts as up).
func (n *Node) Running() bool {
	p := n.process()
	return p != nil && p.Running()
}

// Paused reports whether the node is stopped by Pause.
func (n *Node) Paused() bool {
	p := n.process()
	return p != nil && p.Paused()
}

// Pid returns the process id of the running node.
func (n *Node) Pid() (int, error) {
	p := n.process()
	if p == nil || !p.Running() {
		return 0, fmt.Errorf("%w: %s", ErrNotRunning, n.ID)
	}
	return p.Pid(), nil
}

// Log returns what the process printed so far, over all its starts.
func (n *Node) Log() string {
	b, _ := os.ReadFile(n.LogPath)
	return string(b)
}

// LogTail is the end (at most max bytes) of Log.
func (n *Node) LogTail(max int) string { return logTail(n.LogPath, max) }

// UseBootstrapToken starts the node with token auth from its next Launch
// (--auth token), accepting token as an admin's (--bootstrap-token-file,
// a file in the node's directory); clients made by Dial show it. A
// cluster's nodes must all accept the same one: a follower forwards a
// call with the caller's token, and a node without TLS hands leases
// back to the leader with its own bootstrap token.
func (n *Node) UseBootstrapToken(token string) error {
	file := filepath.Join(filepath.Dir(n.DataDir), "bootstrap-token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.Args = append(n.Args, "--auth", "token", "--bootstrap-token-file", file)
	n.Token = token
	return nil
}

// JoinFlags returns --join and --bootstrap-expect for a cluster of nodes.
func JoinFlags(nodes []*Node) []string {
	var g []string
	for _, n := range nodes {
		g = append(g, n.Gossip)
	}
	return []string{"--join", strings.Join(g, ","), "--bootstrap-expect", fmt.Sprint(len(nodes))}
}
