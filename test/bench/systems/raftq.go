package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// BuildRaftq compiles cmd/raftq without the race detector into dir.
func BuildRaftq(ctx context.Context, dir string) (string, error) {
	bin, err := harness.Build(ctx, dir, false)
	if err != nil {
		return "", fmt.Errorf("build raftq: %w", err)
	}
	return bin, nil
}

// RaftqCluster is raftq nodes on loopback, each with default flags (fsync
// on) and its own data dir under one temp dir.
type RaftqCluster struct {
	Nodes []*harness.Node
	dir   string
	log   *slog.Logger
	// sec is set on a secure cluster (StartRaftqSecure): its clients
	// speak TLS and show a token.
	sec *security
}

// StartRaftq starts n nodes of bin (n > 1 bootstrap together) and waits
// until they have a leader and every node is a voter.
func StartRaftq(ctx context.Context, log *slog.Logger, bin string, n int, extra ...string) (*RaftqCluster, error) {
	return startRaftq(ctx, log, bin, n, false, extra)
}

func startRaftq(ctx context.Context, log *slog.Logger, bin string, n int, secure bool, extra []string) (*RaftqCluster, error) {
	dir, err := os.MkdirTemp("", "raftq-bench-")
	if err != nil {
		return nil, fmt.Errorf("raftq: %w", err)
	}
	c := &RaftqCluster{dir: dir, log: log}
	if secure {
		if c.sec, err = newSecurity(bin, filepath.Join(dir, "tls")); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		node, err := harness.NewNode(harness.NodeConfig{ID: id, Bin: bin, Dir: filepath.Join(dir, id), Args: extra, Wrap: serverWrap()})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
		if c.sec != nil {
			if err := c.sec.secure(node); err != nil {
				c.Close()
				return nil, err
			}
		}
	}
	if n > 1 {
		join := harness.JoinFlags(c.Nodes)
		for _, node := range c.Nodes {
			node.Args = append(slices.Clone(join), node.Args...)
		}
	}
	for _, node := range c.Nodes {
		if err := node.Launch(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx, 60*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close kills every node and removes the data.
func (c *RaftqCluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// Seeds are the nodes' gRPC addresses, first the node given.
func (c *RaftqCluster) Seeds(first *harness.Node) []string {
	var s []string
	if first != nil {
		s = append(s, first.GRPC)
	}
	for _, n := range c.Nodes {
		if n != first {
			s = append(s, n.GRPC)
		}
	}
	return s
}

// adminOpts are what an admin's client needs on top of the defaults: TLS
// and the bootstrap token on a secure cluster, nothing otherwise.
func (c *RaftqCluster) adminOpts() []client.Option {
	if c.sec == nil {
		return nil
	}
	return c.sec.tls.ClientOptions()
}

// status asks node for the cluster status.
func (c *RaftqCluster) status(ctx context.Context, node *harness.Node) (*raftqv1.StatusResponse, error) {
	cl, err := client.Dial(ctx, []string{node.GRPC}, append(c.adminOpts(), client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cl.ClusterStatus(cctx)
}

// WaitReady waits until every running node names the same leader, sees
// every node as a voter, and a ListQueues through the leader answers.
func (c *RaftqCluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, 100*time.Millisecond, "raftq cluster ready", func(ctx context.Context) error {
		leader, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		st, err := c.status(ctx, leader)
		if err != nil {
			return err
		}
		voters := 0
		for _, n := range st.GetNodes() {
			if n.GetSuffrage() == "voter" {
				voters++
			}
		}
		if voters != len(c.Nodes) {
			return fmt.Errorf("%d voters of %d nodes", voters, len(c.Nodes))
		}
		cl, err := client.Dial(ctx, []string{leader.GRPC}, append(c.adminOpts(), client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = cl.ListQueues(cctx, "")
		return err
	})
}

// Leader returns the node every running node names as leader.
func (c *RaftqCluster) Leader(ctx context.Context) (*harness.Node, error) {
	var leaderID string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		st, err := c.status(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", n.ID, err)
		}
		id := st.GetLeaderId()
		if id == "" || (leaderID != "" && id != leaderID) {
			return nil, fmt.Errorf("no agreed leader (%s says %q)", n.ID, id)
		}
		leaderID = id
	}
	for _, n := range c.Nodes {
		if n.ID == leaderID {
			return n, nil
		}
	}
	return nil, fmt.Errorf("leader %q is not one of the nodes", leaderID)
}

// Target returns the workload target for the cluster, named name. Clients
// list the leader first so that producers call it directly (a follower
// would forward every call: one more hop).
func (c *RaftqCluster) Target(ctx context.Context, name string, producerOpts ...client.Option) (workload.Target, *RaftqDriver, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return workload.Target{}, nil, err
	}
	d, err := newRaftqDriver(ctx, c.Seeds(leader), c.adminOpts(), producerOpts...)
	if err != nil {
		return workload.Target{}, nil, err
	}
	notes := []string{
		fmt.Sprintf("%d node(s), default serve flags (fsync on), clients seeded leader first", len(c.Nodes)),
		"sdk: the Go SDK (Enqueue over EnqueueStream, client.Consumer); unary and batch: plain grpc-go on the generated stubs to the leader (unary Enqueue, Lease stream, unary Ack per message / per Lease response)",
	}
	var grpcOpts []grpc.DialOption // plaintext
	if c.sec != nil {
		if err := c.sec.benchIdentity(ctx, d); err != nil {
			d.Close()
			return workload.Target{}, nil, err
		}
		if grpcOpts, err = grpcSecureOptions(c.sec.tls.CAFile(), c.sec.token); err != nil {
			d.Close()
			return workload.Target{}, nil, err
		}
		notes = append(notes, secureNote)
	}
	var procs []workload.Proc
	for _, n := range c.Nodes {
		pid, err := n.Pid()
		if err != nil {
			d.Close()
			return workload.Target{}, nil, fmt.Errorf("%s: %w", n.ID, err)
		}
		label := n.ID
		if n == leader && len(c.Nodes) > 1 {
			label += "(L)"
		}
		procs = append(procs, workload.Proc{Name: label, Pid: pid})
	}
	t := workload.Target{
		Name:   name,
		Nodes:  len(c.Nodes),
		Driver: d,
		Clients: map[string]workload.Driver{
			workload.ClientUnary: NewGRPCDriver(d, leader.GRPC, false, grpcOpts...),
			workload.ClientBatch: NewGRPCDriver(d, leader.GRPC, true, grpcOpts...),
		},
		Procs: func() []workload.Proc { return procs },
		Notes: notes,
		// The leader's applied index, for each phase's log entries.
		LogIndex: func(ctx context.Context) (uint64, error) {
			st, err := c.status(ctx, leader)
			if err != nil {
				return 0, err
			}
			return st.GetAppliedIndex(), nil
		},
	}
	if args := c.Nodes[0].Args; slices.Contains(args, "--ack-carries-grants") {
		t.Notes = append(t.Notes, "serve --ack-carries-grants: acks carry the grants of the credit they free (one entry per delivery cycle)")
	}
	return t, d, nil
}

// RaftqStarter starts an n-node raftq cluster of bin as a System; its
// producers' clients get producerOpts (client.WithUnaryEnqueue for the
// unary baseline).
func RaftqStarter(name, bin string, n int, producerOpts ...client.Option) Starter {
	return raftqStarter(name, bin, n, false, producerOpts)
}

// RaftqStarterFlags is RaftqStarter with serveFlags added to every node's
// raftq serve (e.g. --log-store bolt).
func RaftqStarterFlags(name, bin string, n int, serveFlags []string, producerOpts ...client.Option) Starter {
	return raftqStarterArgs(name, bin, n, false, serveFlags, producerOpts)
}

// RaftqSecureStarter is RaftqStarter with every port secured as
// docs/security.md's hardened cluster has them (see newSecurity).
func RaftqSecureStarter(name, bin string, n int, producerOpts ...client.Option) Starter {
	return raftqStarter(name, bin, n, true, producerOpts)
}

// RaftqCarryStarter is RaftqStarter with serve --ack-carries-grants on
// every node: acks carry the grants of the credit they free (log version
// 10), against raftq-3's grant entry per delivery.
func RaftqCarryStarter(name, bin string, n int, producerOpts ...client.Option) Starter {
	return raftqStarterArgs(name, bin, n, false, []string{"--ack-carries-grants"}, producerOpts)
}

func raftqStarter(name, bin string, n int, secure bool, producerOpts []client.Option) Starter {
	return raftqStarterArgs(name, bin, n, secure, nil, producerOpts)
}

func raftqStarterArgs(name, bin string, n int, secure bool, args []string, producerOpts []client.Option) Starter {
	return Starter{Name: name, Start: func(ctx context.Context, log *slog.Logger) (*System, error) {
		c, err := startRaftq(ctx, log, bin, n, secure, args)
		if err != nil {
			return nil, err
		}
		t, d, err := c.Target(ctx, name, producerOpts...)
		if err != nil {
			c.Close()
			return nil, err
		}
		if len(args) > 0 {
			t.Notes = append(t.Notes, "serve flags: "+strings.Join(args, " "))
		}
		return &System{Target: t, close: func() { d.Close(); c.Close() }}, nil
	}}
}

// RaftqDriver drives raftq through the Go SDK: one client (connection
// set) per producer and per consumer, Enqueue for producers and
// client.Consumer for consumers.
type RaftqDriver struct {
	seeds        []string
	admin        *client.Client
	producerOpts []client.Option
	// clientOpts go to every producer's and consumer's client: TLS and
	// a token of their own on a secure cluster.
	clientOpts []client.Option
}

// NewRaftqDriver returns a driver for the cluster reachable through seeds;
// producerOpts are added to each producer's client.
func NewRaftqDriver(ctx context.Context, seeds []string, producerOpts ...client.Option) (*RaftqDriver, error) {
	return newRaftqDriver(ctx, seeds, nil, producerOpts...)
}

func newRaftqDriver(ctx context.Context, seeds []string, adminOpts []client.Option, producerOpts ...client.Option) (*RaftqDriver, error) {
	admin, err := client.Dial(ctx, seeds, adminOpts...)
	if err != nil {
		return nil, fmt.Errorf("raftq: %w", err)
	}
	return &RaftqDriver{seeds: seeds, admin: admin, producerOpts: producerOpts}, nil
}

// Close closes the admin client.
func (d *RaftqDriver) Close() { _ = d.admin.Close() }

// Admin is the driver's own client.
func (d *RaftqDriver) Admin() *client.Client { return d.admin }

func (d *RaftqDriver) CreateQueue(ctx context.Context, q workload.QueueSpec) error {
	_, err := d.admin.CreateQueue(ctx, q.Name, nil)
	return err
}

type raftqProducer struct {
	c     *client.Client
	queue string
}

func (d *RaftqDriver) NewProducer(ctx context.Context, queue string) (workload.Producer, error) {
	c, err := client.Dial(ctx, d.seeds, append(slices.Clone(d.clientOpts), d.producerOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("raftq producer: %w", err)
	}
	return &raftqProducer{c: c, queue: queue}, nil
}

func (p *raftqProducer) Enqueue(ctx context.Context, payloads [][]byte) error {
	msgs := make([]*raftqv1.EnqueueMessage, len(payloads))
	for i, b := range payloads {
		msgs[i] = &raftqv1.EnqueueMessage{Payload: b}
	}
	ids, err := p.c.Enqueue(ctx, p.queue, msgs...)
	if err != nil {
		return err
	}
	if len(ids) != len(msgs) {
		return fmt.Errorf("raftq enqueue: %d ids for %d messages", len(ids), len(msgs))
	}
	return nil
}

func (p *raftqProducer) Close() error { return p.c.Close() }

type raftqConsumer struct {
	c      *client.Client
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func (d *RaftqDriver) StartConsumer(ctx context.Context, queue string, maxInFlight int, handle func([]byte)) (workload.Consumer, error) {
	c, err := client.Dial(ctx, d.seeds, d.clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("raftq consumer: %w", err)
	}
	con := client.NewConsumer(c, queue, func(_ context.Context, m *raftqv1.Delivery) error {
		handle(m.GetPayload())
		return nil
	}, client.ConsumerOptions{MaxInFlight: maxInFlight, Name: "bench"})
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rc := &raftqConsumer{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- con.Run(rctx) }()
	return rc, nil
}

// Stop cancels Run, which settles the acks of handled deliveries before it
// returns.
func (rc *raftqConsumer) Stop(ctx context.Context) error {
	rc.once.Do(func() {
		rc.cancel()
		select {
		case err := <-rc.done:
			rc.err = err
		case <-ctx.Done():
			rc.err = fmt.Errorf("raftq consumer did not stop: %w", ctx.Err())
		}
		rc.err = errors.Join(rc.err, rc.c.Close())
	})
	return rc.err
}

func (d *RaftqDriver) Depth(ctx context.Context, queue string) (int64, error) {
	qi, err := d.admin.GetQueue(ctx, queue, false)
	if err != nil {
		return 0, err
	}
	s := qi.GetStats()
	return s.GetReady() + s.GetDelayed() + s.GetInFlight(), nil
}
