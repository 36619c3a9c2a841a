//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/tlsconfig"
)

// Cluster is N nodes of the binary, each on its own host of a Network,
// with their Raft traffic relayed through a Proxy.
type Cluster struct {
	onPanic func()
	Net     *Network
	Nodes   []*Node
	Proxy   *Proxy
	log     *slog.Logger

	// sec is the cluster's TLS and gossip key (nil: plaintext).
	sec *security

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// ClusterConfig says what to start.
type ClusterConfig struct {
	Bin   string
	Dir   string
	Nodes int
	// Extra serve flags for every node.
	Extra []string
	// OnCrash hears of nodes that exit on their own.
	OnCrash func(NodeCrash)
	// OnPanic runs when a harness goroutine panics, before the panic goes
	// on (the tests tear every namespace down there).
	OnPanic func()
	// Plaintext runs the nodes without TLS and gossip encryption (with
	// --insecure). By default every port is TLS, Raft mutual TLS, and
	// gossip encrypted, as a production cluster runs.
	Plaintext bool
}

// StartCluster creates the network and proxy (within ctx) and starts every node; it
// returns once a leader is known and every node is a voter. On error
// (and in Close) it removes everything it created.
func StartCluster(ctx context.Context, log *slog.Logger, cfg ClusterConfig) (c *Cluster, err error) {
	c = &Cluster{log: log, conns: map[string]*grpc.ClientConn{}, onPanic: cfg.OnPanic}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.Net, err = NewNetwork(ctx, log, cfg.Nodes); err != nil {
		return c, err
	}
	if c.Proxy, err = NewProxy(ctx, c.Net, log); err != nil {
		return c, err
	}
	if !cfg.Plaintext {
		if c.sec, err = newSecurity(cfg.Bin, filepath.Join(cfg.Dir, "security")); err != nil {
			return c, err
		}
	}
	var join []string
	for _, h := range c.Net.Hosts {
		join = append(join, net.JoinHostPort(h.IP, strconv.Itoa(gossipPort)))
	}
	onCrash := cfg.OnCrash
	if onCrash == nil {
		onCrash = func(NodeCrash) {}
	}
	for _, h := range c.Net.Hosts {
		n, err := newNode(cfg.Bin, cfg.Dir, h, []string{strings.Join(join, ",")}, cfg.Nodes, cfg.Extra, c.sec, log, onCrash)
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := n.Launch(); err != nil {
			return c, err
		}
	}
	// Forming gets its own 90 s, whatever the set-up above used of ctx:
	// on a loaded machine the namespaces took 3m52s of a 4-minute ctx and
	// left the nodes 8 s to elect a leader ("cluster did not form: not
	// within 1m30s: context deadline exceeded" two seconds after the
	// first bootstrap). The wait is bounded by itself, so detaching it
	// from ctx's deadline costs at most those 90 s.
	if _, err := c.WaitHealthy(context.WithoutCancel(ctx), 90*time.Second); err != nil {
		return c, fmt.Errorf("cluster did not form: %w", err)
	}
	return c, nil
}

// Close kills every node and removes the proxy and the network.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(n.Kill)
	}
	wg.Wait()
	c.mu.Lock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	if c.Proxy != nil {
		c.Proxy.Close()
	}
	if c.Net != nil {
		c.Net.Close()
	}
}

// Seeds are the nodes' gRPC addresses.
func (c *Cluster) Seeds() []string {
	var s []string
	for _, n := range c.Nodes {
		s = append(s, n.GRPC)
	}
	return s
}

// Conn is a plain gRPC connection to addr (no retries), shared. Keepalive
// pings notice a paused or cut-off node within seconds (the server allows
// one every 5s).
func (c *Cluster) Conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if c.sec != nil {
		cfg, err := tlsconfig.ClientConfig(c.sec.tls.CAFile(), "", "")
		if err != nil {
			return nil, err
		}
		// The nodes' bootstrap token: an admin, as the checker needs.
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithPerRPCCredentials(bearer(c.sec.tls.Token))}
	}
	cc, err := grpc.NewClient(addr, append(opts,
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 6 * time.Second, Timeout: 3 * time.Second, PermitWithoutStream: false}))...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Dial returns a client of the cluster as users would have one: every
// node as a seed, each attempt bounded so a paused node is passed over.
func (c *Cluster) Dial(ctx context.Context, log *slog.Logger) (*client.Client, error) {
	opts := []client.Option{client.WithLogger(log),
		client.WithRetryPolicy(client.RetryPolicy{AttemptTimeout: 3 * time.Second, MaxBackoff: 500 * time.Millisecond})}
	if c.sec != nil {
		opts = append(opts, c.sec.tls.ClientOptions()...)
	}
	return client.Dial(ctx, c.Seeds(), opts...)
}

// Status asks one node for its own view.
func (c *Cluster) Status(ctx context.Context, n *Node) (*raftqv1.StatusResponse, error) {
	cc, err := c.Conn(n.GRPC)
	if err != nil {
		return nil, err
	}
	return raftqv1.NewClusterClient(cc).Status(ctx, &raftqv1.StatusRequest{})
}

// Leader returns the node that every running, unpaused node names as
// leader and that says so itself.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	var leader string
	var errs []error
	for _, n := range c.Nodes {
		if !n.Running() || n.Paused() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx, n)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.ID, err))
			continue
		}
		switch {
		case st.LeaderId == "":
			errs = append(errs, fmt.Errorf("%s knows no leader", n.ID))
		case leader == "":
			leader = st.LeaderId
		case leader != st.LeaderId:
			errs = append(errs, fmt.Errorf("%s names %s, another node %s", n.ID, st.LeaderId, leader))
		}
	}
	if len(errs) > 0 || leader == "" {
		return nil, errors.Join(append(errs, errors.New("no agreed leader"))...)
	}
	for _, n := range c.Nodes {
		if n.ID == leader {
			return n, nil
		}
	}
	return nil, fmt.Errorf("leader %q is not a node of this cluster", leader)
}

// WaitHealthy waits (up to timeout) until every node runs, all agree on a
// leader and the leader counts every node as a healthy voter; it returns
// the leader.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) (*Node, error) {
	var leader *Node
	var seen attemptLog
	err := harness.WaitFor(ctx, timeout, 100*time.Millisecond, func(ctx context.Context) error {
		start := time.Now()
		l, err := c.Leader(ctx)
		if err == nil {
			err = c.checkVoters(ctx, l)
		}
		leader = l
		seen.add(start, err)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w; attempts: %s", err, seen.String())
	}
	return leader, nil
}

// attemptLog sums up a wait's failed attempts: each distinct error with
// how often, when first and last, and the longest attempt, so a wait that
// fails says what it saw all along, not only at its end.
type attemptLog struct {
	order []string
	by    map[string]*attemptSeen
}

// maxAttemptKinds bounds the distinct errors an attemptLog keeps (an
// error naming changing figures is a new one each time).
const maxAttemptKinds = 24

type attemptSeen struct {
	n           int
	first, last time.Time
	longest     time.Duration
}

func (a *attemptLog) add(start time.Time, err error) {
	if err == nil {
		return
	}
	if a.by == nil {
		a.by = map[string]*attemptSeen{}
	}
	msg := err.Error()
	s, ok := a.by[msg]
	if !ok && len(a.order) >= maxAttemptKinds {
		msg = "(other errors)"
		s, ok = a.by[msg]
	}
	if !ok {
		s = &attemptSeen{first: start}
		a.by[msg] = s
		a.order = append(a.order, msg)
	}
	s.n++
	s.last = start
	s.longest = max(s.longest, time.Since(start))
}

func (a *attemptLog) String() string {
	var b strings.Builder
	for _, msg := range a.order {
		s := a.by[msg]
		fmt.Fprintf(&b, "\n  %dx from %s to %s (longest %v): %s", s.n, s.first.Format("15:04:05.000"), s.last.Format("15:04:05.000"),
			s.longest.Round(time.Millisecond), strings.ReplaceAll(msg, "\n", " | "))
	}
	return b.String()
}

func (c *Cluster) checkVoters(ctx context.Context, leader *Node) error {
	for _, n := range c.Nodes {
		if !n.Running() || n.Paused() {
			return fmt.Errorf("%s is down", n.ID)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.Status(sctx, leader)
	if err != nil {
		return err
	}
	voters := 0
	for _, nd := range st.Nodes {
		if nd.Suffrage == "voter" && nd.Healthy {
			voters++
		}
	}
	if voters != len(c.Nodes) {
		return fmt.Errorf("%d healthy voters of %d: %v", voters, len(c.Nodes), st.Nodes)
	}
	return nil
}

// Verify asks every node in turn (until one answers) to compare the
// replicas' digests.
func (c *Cluster) Verify(ctx context.Context) (*raftqv1.VerifyResponse, error) {
	var errs []error
	for _, n := range c.Nodes {
		cc, err := c.Conn(n.GRPC)
		if err != nil {
			return nil, err
		}
		vctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		v, err := raftqv1.NewClusterClient(cc).Verify(vctx, &raftqv1.VerifyRequest{})
		cancel()
		if err == nil {
			return v, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.ID, err))
	}
	return nil, errors.Join(errs...)
}

// Node returns the node with the given id.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// nodeAt names the node serving at gRPC address addr ("" if none does).
func (c *Cluster) nodeAt(addr string) string {
	for _, n := range c.Nodes {
		if n.GRPC == addr {
			return n.ID
		}
	}
	return ""
}

// guard is deferred at the top of every goroutine the harness starts: a
// panic tears down what the tests registered before it goes on.
func (c *Cluster) guard() {
	if r := recover(); r != nil {
		if c.onPanic != nil {
			c.onPanic()
		}
		panic(r)
	}
}

// bearer sends a token as `authorization: Bearer TOKEN` with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
