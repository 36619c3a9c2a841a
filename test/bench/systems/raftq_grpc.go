package systems

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/bench/workload"
)

// GRPCDriver drives raftq the way a client in another language does: a
// plain grpc-go connection on the generated stubs, no SDK. Producers make
// one unary Enqueue per call (as many messages as the call carries);
// consumers hold a Lease stream and ack with unary Ack calls, one per
// message, or, with batchAcks, one per Lease response. Every connection
// goes to one address (the leader: no forwarding hop, as for the SDK).
type GRPCDriver struct {
	admin     workload.Driver
	addr      string
	batchAcks bool
	dialOpts  []grpc.DialOption
}

// NewGRPCDriver returns a driver for the node at addr that leaves queue
// administration to admin; dialOpts replace the default (plaintext)
// transport credentials when given.
func NewGRPCDriver(admin workload.Driver, addr string, batchAcks bool, dialOpts ...grpc.DialOption) *GRPCDriver {
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &GRPCDriver{admin: admin, addr: addr, batchAcks: batchAcks, dialOpts: dialOpts}
}

// grpcSecureOptions are the dial options of a secure cluster's plain gRPC
// clients: TLS verified against caFile, and token as a bearer token on
// every call (what a client in any language sends).
func grpcSecureOptions(caFile, token string) ([]grpc.DialOption, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("raftq grpc: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("raftq grpc: no certificate in %s", caFile)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(bearer(token)),
	}, nil
}

// bearer is a token as per-RPC credentials (`authorization: Bearer T`).
type bearer string

func (t bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

func (d *GRPCDriver) dial() (*grpc.ClientConn, raftqv1.BrokerClient, error) {
	cc, err := grpc.NewClient(d.addr, d.dialOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("raftq grpc: %w", err)
	}
	return cc, raftqv1.NewBrokerClient(cc), nil
}

// CreateQueue and Depth are administration, not the path measured: the
// admin driver does them (on a secure cluster the bench identity may
// only produce and consume).
func (d *GRPCDriver) CreateQueue(ctx context.Context, q workload.QueueSpec) error {
	return d.admin.CreateQueue(ctx, q)
}

func (d *GRPCDriver) Depth(ctx context.Context, queue string) (int64, error) {
	return d.admin.Depth(ctx, queue)
}

type grpcProducer struct {
	cc    *grpc.ClientConn
	bc    raftqv1.BrokerClient
	queue string
}

func (d *GRPCDriver) NewProducer(ctx context.Context, queue string) (workload.Producer, error) {
	cc, bc, err := d.dial()
	if err != nil {
		return nil, err
	}
	return &grpcProducer{cc: cc, bc: bc, queue: queue}, nil
}

func (p *grpcProducer) Enqueue(ctx context.Context, payloads [][]byte) error {
	msgs := make([]*raftqv1.EnqueueMessage, len(payloads))
	for i, b := range payloads {
		msgs[i] = &raftqv1.EnqueueMessage{Payload: b}
	}
	r, err := p.bc.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: p.queue, Messages: msgs})
	if err != nil {
		return err
	}
	if n := len(r.GetMessageIds()); n != len(msgs) {
		return fmt.Errorf("raftq enqueue: %d ids for %d messages", n, len(msgs))
	}
	return nil
}

func (p *grpcProducer) Close() error { return p.cc.Close() }

// grpcConsumer reads one Lease stream; each unit of work (one delivery,
// or one Lease response with batchAcks) is handled and acked by its own
// goroutine, at most maxInFlight at once: what a worker pool does.
type grpcConsumer struct {
	cc    *grpc.ClientConn
	bc    raftqv1.BrokerClient
	queue string
	// ctx is the stream's: acks and hand-backs end with it.
	ctx    context.Context
	cancel context.CancelFunc
	recvd  chan struct{} // closed when the receive loop ends

	mu       sync.Mutex
	stopping bool
	work     sync.WaitGroup // handlers and their acks
	firstErr error

	once    sync.Once
	stopErr error
}

func (d *GRPCDriver) StartConsumer(ctx context.Context, queue string, maxInFlight int, handle func([]byte)) (workload.Consumer, error) {
	cc, bc, err := d.dial()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := bc.Lease(sctx, &raftqv1.LeaseRequest{Queue: queue, ConsumerName: "bench", MaxInFlight: int32(maxInFlight)})
	if err != nil {
		cancel()
		cc.Close()
		return nil, fmt.Errorf("raftq lease: %w", err)
	}
	c := &grpcConsumer{cc: cc, bc: bc, queue: queue, ctx: sctx, cancel: cancel, recvd: make(chan struct{})}
	sem := make(chan struct{}, maxInFlight)
	go func() {
		defer close(c.recvd)
		for {
			r, err := stream.Recv()
			if err != nil {
				if sctx.Err() == nil && !errors.Is(err, io.EOF) {
					c.fail(fmt.Errorf("raftq lease stream: %w", err))
				}
				return
			}
			units := [][]*raftqv1.Delivery{r.GetMessages()}
			if !d.batchAcks {
				units = units[:0]
				for _, m := range r.GetMessages() {
					units = append(units, []*raftqv1.Delivery{m})
				}
			}
			for _, u := range units {
				if !c.begin() {
					c.handBack(u)
					continue
				}
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; c.work.Done() }()
					refs := make([]*raftqv1.LeaseRef, len(u))
					for i, m := range u {
						handle(m.GetPayload())
						refs[i] = &raftqv1.LeaseRef{MessageId: m.GetId(), LeaseToken: m.GetLeaseToken()}
					}
					c.ack(refs)
				}()
			}
		}
	}()
	return c, nil
}

// begin counts a unit of work unless the consumer is stopping.
func (c *grpcConsumer) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return false
	}
	c.work.Add(1)
	return true
}

func (c *grpcConsumer) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstErr == nil {
		c.firstErr = err
	}
}

func (c *grpcConsumer) ack(refs []*raftqv1.LeaseRef) {
	r, err := c.bc.Ack(c.ctx, &raftqv1.AckRequest{Queue: c.queue, Acks: refs})
	if err != nil {
		c.fail(fmt.Errorf("raftq ack: %w", err))
		return
	}
	for _, res := range r.GetResults() {
		if !res.GetOk() {
			c.fail(fmt.Errorf("raftq ack refused: %s: %s", codes.Code(res.GetCode()), res.GetError()))
		}
	}
}

// handBack returns deliveries that arrived after Stop began, unhandled and
// uncounted, as the SDK does.
func (c *grpcConsumer) handBack(ds []*raftqv1.Delivery) {
	items := make([]*raftqv1.NackItem, len(ds))
	for i, m := range ds {
		items[i] = &raftqv1.NackItem{MessageId: m.GetId(), LeaseToken: m.GetLeaseToken(), Reason: "consumer stopped", Unprocessed: true}
	}
	_, _ = c.bc.Nack(c.ctx, &raftqv1.NackRequest{Queue: c.queue, Nacks: items})
}

// Stop takes no more deliveries, waits for the handled ones' acks, then
// closes the stream and the connection.
func (c *grpcConsumer) Stop(ctx context.Context) error {
	c.once.Do(func() {
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
		done := make(chan struct{})
		go func() { c.work.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			c.fail(fmt.Errorf("raftq consumer: acks not settled: %w", ctx.Err()))
		}
		c.cancel()
		<-c.recvd
		c.mu.Lock()
		c.stopErr = c.firstErr
		c.mu.Unlock()
		c.stopErr = errors.Join(c.stopErr, c.cc.Close())
	})
	return c.stopErr
}
