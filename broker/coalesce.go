package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// coalescer merges concurrent client requests of one kind (enqueues, acks)
// into one Raft entry, because the leader's log write + fsync, not CPU,
// bounds throughput: more messages per entry is more messages per fsync.
// A request is proposed at once when fewer than maxInFlight entries are in
// flight; otherwise it waits for one to commit and goes with whatever else
// queued up meanwhile. No timer adds latency.
//
// There is no dispatcher goroutine: the caller that finds a free slot
// starts the proposer itself, and a proposer whose entry has committed
// takes the next queued batch on the spot. A lone call thus reaches
// raft.Apply one goroutine hand-off after its handler (before: handler →
// dispatcher → proposer), and under load each entry saves the proposer →
// dispatcher wake-up and a goroutine start: on a loaded two-core machine
// every hand-off is a wait for a core.
type coalescer[Req any] struct {
	propose     func(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error)
	build       func(reqs []Req) *fsmv1.Command
	size        func(Req) (items, bytes int)
	maxInFlight int
	maxItems    int
	maxBytes    int
	timeout     time.Duration
	// release, if set, is called once the coalescer is done with a
	// request (answered or dropped), whether or not its caller still
	// waits: what the request holds (the pending gate's bytes) is held
	// until its entry has committed or failed.
	release func(Req)
	pool    sync.Pool // of *pending[Req]

	mu       sync.Mutex
	queued   []*pending[Req] // non-empty only while inFlight == maxInFlight
	inFlight int
	stopped  bool
	proposes sync.WaitGroup
}

// pending is one caller's request; done receives the entry's result and
// the request's position in it. Answered callers hand theirs back to the
// coalescer's pool (two allocations fewer per call); one whose caller
// gave up is left to the garbage collector, since the coalescer may still
// answer it.
type pending[Req any] struct {
	req  Req
	done chan batchOutcome
}

// finish answers p. After the send the coalescer no longer touches p: it
// is its caller's again, who may reuse it.
func (c *coalescer[Req]) finish(p *pending[Req], out batchOutcome) {
	if c.release != nil {
		c.release(p.req)
	}
	p.done <- out
}

type batchOutcome struct {
	res    fsm.Result
	pos    int // index of this request within the entry's command
	offset int // items of the requests before it, for per-item results
	err    error
}

// ErrStopping is the error of a request that was still queued when the
// node began to stop: it was never proposed, so a retry elsewhere is safe.
var ErrStopping = errors.New("node stopping")

func newCoalescer[Req any](maxInFlight, maxItems, maxBytes int,
	propose func(context.Context, *fsmv1.Command) (fsm.Result, error),
	build func([]Req) *fsmv1.Command, size func(Req) (int, int)) *coalescer[Req] {
	return &coalescer[Req]{
		propose: propose, build: build, size: size,
		maxInFlight: maxInFlight, maxItems: maxItems, maxBytes: maxBytes,
		timeout: 30 * time.Second,
	}
}

// submit hands req to the batcher and waits for its entry to commit.
// c.release is called when the batcher is done with req, which may be
// after submit returned to a caller that gave up.
func (c *coalescer[Req]) submit(ctx context.Context, req Req) (batchOutcome, error) {
	if err := ctx.Err(); err != nil {
		if c.release != nil {
			c.release(req)
		}
		return batchOutcome{}, err
	}
	var zero Req
	p, _ := c.pool.Get().(*pending[Req])
	if p == nil {
		p = &pending[Req]{done: make(chan batchOutcome, 1)}
	}
	p.req = req
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		p.req = zero
		c.pool.Put(p)
		if c.release != nil {
			c.release(req)
		}
		return batchOutcome{}, ErrStopping
	}
	c.queued = append(c.queued, p)
	batch := c.takeLocked()
	c.mu.Unlock()
	if batch != nil {
		go c.run(batch)
	}
	select {
	case out := <-p.done:
		p.req = zero
		c.pool.Put(p)
		return out, out.err
	case <-ctx.Done():
		// The entry may still commit: outcome unknown to this caller,
		// which is what dedup ids and lease tokens make safe to retry.
		return batchOutcome{}, ctx.Err()
	}
}

// takeLocked takes the next batch off the queue when an entry slot is
// free (nil otherwise) and counts it in flight. c.mu is held.
func (c *coalescer[Req]) takeLocked() []*pending[Req] {
	if c.stopped || c.inFlight >= c.maxInFlight || len(c.queued) == 0 {
		return nil
	}
	n, items, bytes := 0, 0, 0
	for n < len(c.queued) {
		i, b := c.size(c.queued[n].req)
		if n > 0 && (items+i > c.maxItems || bytes+b > c.maxBytes) {
			break
		}
		items, bytes, n = items+i, bytes+b, n+1
	}
	batch := c.queued[:n:n] // capped: appends to the queue cannot reach it
	c.queued = c.queued[n:]
	c.inFlight++
	c.proposes.Add(1)
	return batch
}

// run proposes batch, then whatever queued up while it was in flight,
// until nothing is queued.
func (c *coalescer[Req]) run(batch []*pending[Req]) {
	for batch != nil {
		c.apply(batch)
		c.mu.Lock()
		c.inFlight--
		c.proposes.Done()
		batch = c.takeLocked()
		c.mu.Unlock()
	}
}

// queuedLen is how many requests wait for an entry (for tests).
func (c *coalescer[Req]) queuedLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queued)
}

// close stops taking requests, waits for the entries in flight and
// answers what is still queued with ErrStopping.
func (c *coalescer[Req]) close() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.proposes.Wait()
	c.mu.Lock()
	queued := c.queued
	c.queued = nil
	c.mu.Unlock()
	for _, p := range queued {
		c.finish(p, batchOutcome{err: ErrStopping})
	}
}

func (c *coalescer[Req]) apply(batch []*pending[Req]) {
	reqs := make([]Req, len(batch))
	for i, p := range batch {
		reqs[i] = p.req
	}
	cmd := c.build(reqs)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	res, err := c.propose(ctx, cmd)
	cancel()
	if err == nil {
		err = res.Failure() // the entry's own failure is every request's
	}
	offset := 0
	for i, p := range batch {
		// Sized before finish: once answered, p is its caller's again.
		items, _ := c.size(p.req)
		c.finish(p, batchOutcome{res: res, pos: i, offset: offset, err: err})
		offset += items
	}
}
