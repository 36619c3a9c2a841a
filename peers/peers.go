// Package peers keeps this node's client connections to the other nodes
// of its cluster: one per peer (node id and address), over mutual TLS with
// node certificates when the node runs TLS, carrying the caller's
// identity on every call. The API edge forwards and asks digests through
// it, the data group asks the leader for recounts, and the Raft
// reconciler asks a joining node for its applied index.
//
// It sits below everything that calls peers, so the host builds it first
// and hands it to each of them at construction: nothing is bound late.
package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/tlsconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// MaxMessageBytes is the largest message a connection to a peer sends or
// receives: the largest request a node reads (transport.MaxRequestBytes).
const MaxMessageBytes = 64 << 20

// Pool keeps one client connection per peer (node id and address). With
// TLS, a connection presents this node's certificate and accepts only the
// node certificate of the id it was made for, so a call is never
// forwarded to, nor a digest taken from, anything but that node. Safe for
// concurrent use.
type Pool struct {
	tls *tlsconfig.Source // nil: plaintext
	// identity carries the caller's identity on every call
	// (auth.Forwarder.ClientUnary); nil: none.
	identity grpc.UnaryClientInterceptor
	// keepalive pings a connection that has received nothing for a
	// while and closes it when the ping goes unanswered (defaultKeepalive).
	keepalive keepalive.ClientParameters
	mu        sync.Mutex
	conns     map[key]*grpc.ClientConn
	closed    bool // no connection is made after Close (none would be closed)
}

type key struct{ id, addr string }

// defaultKeepalive: a connection that has received nothing for 10 s is
// pinged, and closed if no answer comes within 5 s; the next call dials
// afresh. Without it, a connection black-holed by a partition (packets
// dropped, no reset) stayed open after the network healed, and every
// call on it (a forward to the leader, Status's fan-out) ran to its
// deadline until TCP's retransmission, backed off to tens of seconds,
// got through. 10 s is grpc-go's least client ping interval, and at
// least the 5 s the server's keepalive policy allows
// (transport/server.go).
var defaultKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// New returns a pool dialling with src's node certificate (nil:
// plaintext), every unary call passing through identity (nil: none).
func New(src *tlsconfig.Source, identity grpc.UnaryClientInterceptor) *Pool {
	return &Pool{tls: src, identity: identity, keepalive: defaultKeepalive, conns: map[key]*grpc.ClientConn{}}
}

// ErrClosed: the pool was closed (the node is stopping).
var ErrClosed = errors.New("the node's server is stopping")

// Get returns the connection to node id at addr, made on first use.
func (p *Pool) Get(id, addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("peer %s: %w", id, ErrClosed)
	}
	k := key{id, addr}
	if c, ok := p.conns[k]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		if id == "" {
			return nil, fmt.Errorf("peer %s: node id unknown, cannot check its certificate", addr)
		}
		creds = credentials.NewTLS(p.tls.NodeClientConfig(id))
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithKeepaliveParams(p.keepalive)}
	if p.identity != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(p.identity))
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	p.conns[k] = c
	return c, nil
}

// Progress is node id's applied index, from its own Status (local_only)
// at its API address grpcAddr: the leader's cluster.PeerProgress, which
// decides when a joining nonvoter has caught up.
func (p *Pool) Progress(ctx context.Context, id, grpcAddr string) (uint64, error) {
	if grpcAddr == "" {
		return 0, fmt.Errorf("node %s advertises no gRPC address", id)
	}
	conn, err := p.Get(id, grpcAddr)
	if err != nil {
		return 0, err
	}
	st, err := raftqv1.NewClusterClient(conn).Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
	if err != nil {
		return 0, err
	}
	return st.GetAppliedIndex(), nil
}

// GroupProgress asks node id for the index of the last entry of data
// group it applied (a local-only Status naming the group; a placed
// group's leader asks before promoting a nonvoter).
func (p *Pool) GroupProgress(ctx context.Context, group, id, grpcAddr string) (uint64, error) {
	if grpcAddr == "" {
		return 0, fmt.Errorf("node %s advertises no gRPC address", id)
	}
	conn, err := p.Get(id, grpcAddr)
	if err != nil {
		return 0, err
	}
	st, err := raftqv1.NewClusterClient(conn).Status(ctx, &raftqv1.StatusRequest{LocalOnly: true, Group: group})
	if err != nil {
		return 0, err
	}
	return st.GetAppliedIndex(), nil
}

// Close closes every connection; Get fails from now on.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k, c := range p.conns {
		_ = c.Close()
		delete(p.conns, k)
	}
}
