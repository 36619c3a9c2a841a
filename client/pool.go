package client

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// pool holds one grpc.ClientConn per node address and what the client knows
// about where to send calls: the leader, if a node has named it, otherwise
// the seed under a cursor that moves on when a seed is unreachable. Seeds
// grow with the nodes the client learns of.
type pool struct {
	dialOpts []grpc.DialOption

	mu     sync.Mutex
	seeds  []string
	cursor int
	leader string
	conns  map[string]*grpc.ClientConn
	muxes  map[string]*enqueueMux
	closed bool
}

func newPool(seeds []string, dialOpts []grpc.DialOption) *pool {
	return &pool{
		dialOpts: dialOpts,
		seeds:    seeds,
		conns:    make(map[string]*grpc.ClientConn),
		muxes:    make(map[string]*enqueueMux),
	}
}

// target is the address the next attempt should use.
func (p *pool) target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader != "" {
		return p.leader
	}
	return p.seeds[p.cursor]
}

// seedTarget ignores the leader: for calls answered by whichever node is
// asked (cluster status of a chosen node), the first seed is the one the
// user named.
func (p *pool) seedTarget() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seeds[p.cursor]
}

// setLeader records the leader's address, remembering it as a node to
// rotate over when the leader is unknown.
func (p *pool) setLeader(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leader = addr
	p.learnLocked(addr)
}

// learn adds node addresses (from redirects or cluster status) to the
// seeds, so a client given one seed can still fail over when it dies.
func (p *pool) learn(addrs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.learnLocked(addrs...)
}

func (p *pool) learnLocked(addrs ...string) {
	for _, a := range addrs {
		if a != "" && !slices.Contains(p.seeds, a) {
			p.seeds = append(p.seeds, a)
		}
	}
}

func (p *pool) seedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seeds)
}

// forgetLeader drops the leader hint if it still points at addr, which has
// just said it is not the leader or could not be reached.
func (p *pool) forgetLeader(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == addr {
		p.leader = ""
	}
}

// unreachable records that addr did not answer: the leader hint is dropped
// and, if addr is the current seed, the cursor moves to the next seed.
func (p *pool) unreachable(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leader == addr {
		p.leader = ""
	}
	if p.seeds[p.cursor] == addr {
		p.cursor = (p.cursor + 1) % len(p.seeds)
	}
}

// conn returns the cached connection to addr, creating it on first use.
// grpc.NewClient does not block: the connection is made by the first RPC.
func (p *pool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if cc, ok := p.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, p.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("raftq client: connect %s: %w", addr, err)
	}
	p.conns[addr] = cc
	return cc, nil
}

// enqueuer returns the EnqueueStream multiplexer for addr, whose
// connection is cc.
func (p *pool) enqueuer(addr string, cc *grpc.ClientConn) (*enqueueMux, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	m, ok := p.muxes[addr]
	if !ok {
		m = newEnqueueMux(cc)
		p.muxes[addr] = m
	}
	return m, nil
}

func (p *pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *pool) close() error {
	p.mu.Lock()
	conns, muxes := p.conns, p.muxes
	p.conns, p.muxes = nil, nil
	p.closed = true
	p.mu.Unlock()
	for _, m := range muxes {
		m.close()
	}
	var first error
	for _, cc := range conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// waitReady blocks until a connection to some seed is READY, trying seeds
// in turn and backing off between rounds.
func (p *pool) waitReady(ctx context.Context, rp RetryPolicy) error {
	for round := 1; ; round++ {
		for range p.seedCount() {
			addr := p.seedTarget()
			cc, err := p.conn(addr)
			if err != nil {
				return err
			}
			if connReady(ctx, cc) {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("raftq client: no seed reachable: %w", ctx.Err())
			}
			p.unreachable(addr)
		}
		if err := sleepCtx(ctx, rp.backoff(round)); err != nil {
			return fmt.Errorf("raftq client: no seed reachable: %w", err)
		}
	}
}

// connReady drives cc to READY or to a failure, whichever comes first.
func connReady(ctx context.Context, cc *grpc.ClientConn) bool {
	cc.Connect()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.TransientFailure, connectivity.Shutdown:
			return false
		}
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
	}
}
