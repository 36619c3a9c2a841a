// Package client is the Go SDK for raftq: it finds the leader from a seed
// list, retries calls safely and runs a consumer loop that survives leader
// changes.
//
// Every call is retried after UNAVAILABLE (node down, no leader, leader
// moved, or leadership lost with the outcome unknown) under the Client's
// RetryPolicy; other codes are final. Retrying is safe because the broker
// recognises a repeat: enqueues carry dedup ids (Enqueue sets one per
// message), PurgeQueue and Redrive carry an idempotency key chosen before
// the first attempt, and an Ack or Nack of a lease the same call already
// settled answers OK (the broker remembers settled tokens for 5 minutes).
// CreateQueue and DeleteQueue retried after a lost answer report
// AlreadyExists or NotFound. docs/api.md, "Retries", has the
// table.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrClosed is returned by calls made on, or interrupted by, a closed Client.
var ErrClosed = errors.New("raftq client: closed")

// Client talks to a raftq cluster. It is safe for concurrent use. Calls go
// to the last known leader (saving the follower's forwarding hop) or to a
// seed; concurrent Enqueue calls to a node share one EnqueueStream (see
// WithUnaryEnqueue); the Lease stream of a Consumer always follows the
// leader.
type Client struct {
	log          *slog.Logger
	retry        RetryPolicy
	pool         *pool
	unaryEnqueue bool
	failFast     bool
}

// MaxReceiveBytes is the largest response the Client accepts, and the
// max_batch_bytes its consumers ask for: the largest message a queue can
// hold (a 16 MiB payload) with every header, key and delivery field at its
// limit, and room to spare. gRPC's default (4 MiB) would refuse such a
// delivery, and each refusal would cost the message a delivery attempt.
const MaxReceiveBytes = 17 << 20

// MaxPayloadBytes is the largest payload any queue accepts (a queue's
// max_message_bytes can be raised up to it; 1 MiB by default), and
// MaxRequestBytes the largest request a node reads. Enqueue refuses what
// exceeds them before sending it.
const (
	MaxPayloadBytes = 16 << 20
	MaxRequestBytes = 64 << 20
)

// Option configures Dial.
type Option func(*options)

type options struct {
	log      *slog.Logger
	retry    RetryPolicy
	creds    credentials.TransportCredentials
	dialOpts []grpc.DialOption
	wait     bool
	unary    bool
	failFast bool
	// err is an option's failure (a TLS file that cannot be read),
	// returned by Dial.
	err error
}

// WithLogger sets the logger for retries, redirects and consumer events.
// The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithRetryPolicy sets the retry policy applied to every call of the Client.
// Client.WithRetryPolicy overrides it for a subset of calls.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(o *options) { o.retry = p }
}

// WithTransportCredentials sets the credentials used for every node (TLS).
// The default is insecure (plaintext). WithTLS and WithTLSConfig are the
// short forms.
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(o *options) {
		if c != nil {
			o.creds = c
		}
	}
}

// WithDialOptions adds grpc.DialOptions (interceptors, keepalive, ...) to
// every connection the Client creates.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithWaitForConnection makes Dial block until one seed accepts a
// connection (or ctx ends). Without it Dial connects lazily and the first
// call reports an unreachable cluster.
func WithWaitForConnection() Option {
	return func(o *options) { o.wait = true }
}

// WithFailFast makes a call fail at once, with an *UnreachableError
// naming every address tried, when every node the client knows refuses the
// connection, instead of retrying until the call's deadline. Nodes that
// answer (even "no leader yet") or are merely slow are retried as usual.
// Command-line tools want this; a long-running service riding out a full
// cluster restart does not.
func WithFailFast() Option {
	return func(o *options) { o.failFast = true }
}

// WithUnaryEnqueue sends every Enqueue as its own unary RPC. By default
// concurrent Enqueue calls to a node share one EnqueueStream (falling back
// to unary calls on a node without it), which costs the broker and the
// client far less CPU per call; the results and retries are the same.
func WithUnaryEnqueue() Option {
	return func(o *options) { o.unary = true }
}

// Dial returns a Client for the cluster reachable through seeds, a list of
// host:port gRPC addresses of any of its nodes. Connections are made lazily
// and one is kept per address until Close.
func Dial(ctx context.Context, seeds []string, opts ...Option) (*Client, error) {
	o := options{
		log:   slog.New(slog.DiscardHandler),
		creds: insecure.NewCredentials(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	var clean []string
	for _, s := range seeds {
		if s == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("raftq client: seed %q: %w", s, err)
		}
		clean = append(clean, s)
	}
	if len(clean) == 0 {
		return nil, errors.New("raftq client: no seed addresses")
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(o.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReceiveBytes)),
		// grpc's default reconnect backoff grows to 2 minutes; a restarted
		// node must become usable again within a few seconds.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   2 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, o.dialOpts...)
	c := &Client{
		log:          o.log,
		retry:        o.retry,
		pool:         newPool(clean, dialOpts),
		unaryEnqueue: o.unary,
		failFast:     o.failFast,
	}
	if o.wait {
		if err := c.pool.waitReady(ctx, o.retry.withDefaults()); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close closes every connection. Calls in progress fail; later calls return
// ErrClosed. Clients derived with WithRetryPolicy share the connections and
// are closed too.
func (c *Client) Close() error {
	return c.pool.close()
}

// WithRetryPolicy returns a Client that shares c's connections and leader
// knowledge but retries with p: a per-call override, as in
// c.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}).Enqueue(...).
func (c *Client) WithRetryPolicy(p RetryPolicy) *Client {
	cp := *c
	cp.retry = p
	return &cp
}
