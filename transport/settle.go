package transport

import (
	"context"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc/tap"
)

// settleWait bounds how long a Lease stream that ended waits for the acks
// and nacks that reached the node before it (settleGate) before its
// consumer is released anyway.
const settleWait = 10 * time.Second

// settleMethods are the calls that settle leases: a release proposed
// ahead of them would count the attempts they settle and make them fail
// as stale.
var settleMethods = map[string]bool{
	raftqv1.Broker_Ack_FullMethodName:  true,
	raftqv1.Broker_Nack_FullMethodName: true,
}

// settleGate tracks the Ack and Nack calls in progress on this node from
// the moment their headers are read, so that a Lease stream that ends can
// wait for every one that arrived before it did.
//
// Why at the headers: a client that acks asynchronously and then closes
// its stream sends, on one connection, the acks' frames before the
// stream's reset. gRPC reads a connection's frames in order on one
// goroutine and calls the tap handle there, before the call's handler is
// even scheduled, so by the time the Lease handler sees its context end
// every such ack is registered here. A count taken in the handler (or at
// the coalescer) could miss an ack whose goroutine had not yet run.
type settleGate struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]*settleCall
}

type settleCall struct{ waiters []*settleWaiter }

type settleWaiter struct {
	n    int
	done chan struct{}
}

func newSettleGate() *settleGate { return &settleGate{open: map[uint64]*settleCall{}} }

// tap is the server's InTapHandle: it registers a settling call until its
// stream's context ends (after the handler has returned, or when the
// client gives up on it).
func (g *settleGate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if settleMethods[info.FullMethodName] {
		context.AfterFunc(ctx, g.arrive())
	}
	return ctx, nil
}

// arrive registers one call; the returned func ends it.
func (g *settleGate) arrive() func() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next++
	id := g.next
	g.open[id] = &settleCall{}
	return func() { g.finish(id) }
}

func (g *settleGate) finish(id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.open[id]
	delete(g.open, id)
	for _, w := range c.waiters {
		if w.n--; w.n == 0 {
			close(w.done)
		}
	}
}

// wait returns once every call registered before it was called has ended,
// or when ctx ends.
func (g *settleGate) wait(ctx context.Context) {
	g.mu.Lock()
	if len(g.open) == 0 {
		g.mu.Unlock()
		return
	}
	w := &settleWaiter{n: len(g.open), done: make(chan struct{})}
	for _, c := range g.open {
		c.waiters = append(c.waiters, w)
	}
	g.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
	}
}

// closeConsumer ends a Lease stream's consumer once the acks and nacks
// that reached this node before the stream ended have been answered: each
// answered one has been applied, so the consumer's release, which counts
// an attempt for every lease it still holds, is proposed after them.
func (s *Server) closeConsumer(c *scheduler.Consumer) {
	// Nothing more for a stream that is gone: a hand-back among the
	// settles would otherwise be granted to it again and released counted.
	c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), settleWait)
	defer cancel()
	s.settles.wait(ctx)
	c.Close()
}
