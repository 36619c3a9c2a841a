package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
type coalescer[Req any] struct {
	propose     func(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error)
	build       func(reqs []Req) *fsmv1.Command
	size        func(Req) (items, bytes int)
	maxInFlight int
	maxItems    int
	maxBytes    int
	timeout     time.Duration

	in   chan *pending[Req]
	stop chan struct{}
	wg   sync.WaitGroup
	// waiting is how many requests are queued for the next entries (not
	// yet proposed), for tests.
	waiting atomic.Int64
}

// pending is one caller's request; done receives the entry's result and
// the request's position in it.
type pending[Req any] struct {
	req  Req
	done chan batchOutcome
	// release, if set, is called once the coalescer is done with req
	// (answered or dropped), whether or not its caller still waits.
	release func()
}

func (p *pending[Req]) finish(out batchOutcome) {
	p.done <- out
	if p.release != nil {
		p.release()
	}
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
	c := &coalescer[Req]{
		propose: propose, build: build, size: size,
		maxInFlight: maxInFlight, maxItems: maxItems, maxBytes: maxBytes,
		timeout: 30 * time.Second,
		in:      make(chan *pending[Req]),
		stop:    make(chan struct{}),
	}
	c.wg.Add(1)
	go c.run()
	return c
}

// submit hands req to the batcher and waits for its entry to commit.
// release (may be nil) is called when the batcher is done with req, which
// may be after submit returned to a caller that gave up.
func (c *coalescer[Req]) submit(ctx context.Context, req Req, release func()) (batchOutcome, error) {
	p := &pending[Req]{req: req, done: make(chan batchOutcome, 1), release: release}
	select {
	case c.in <- p:
	case <-ctx.Done():
		if release != nil {
			release()
		}
		return batchOutcome{}, ctx.Err()
	case <-c.stop:
		if release != nil {
			release()
		}
		return batchOutcome{}, ErrStopping
	}
	select {
	case out := <-p.done:
		return out, out.err
	case <-ctx.Done():
		// The entry may still commit: outcome unknown to this caller,
		// which is what dedup ids and lease tokens make safe to retry.
		return batchOutcome{}, ctx.Err()
	}
}

// queuedLen is how many requests wait for an entry.
func (c *coalescer[Req]) queuedLen() int { return int(c.waiting.Load()) }

func (c *coalescer[Req]) close() {
	close(c.stop)
	c.wg.Wait()
}

func (c *coalescer[Req]) run() {
	defer c.wg.Done()
	var (
		queued   []*pending[Req]
		inFlight int
		finished = make(chan struct{}, c.maxInFlight)
		proposes sync.WaitGroup
	)
	defer func() {
		proposes.Wait()
		for _, p := range queued {
			p.finish(batchOutcome{err: ErrStopping})
		}
	}()
	for {
		for inFlight < c.maxInFlight && len(queued) > 0 {
			n, items, bytes := 0, 0, 0
			for n < len(queued) {
				i, b := c.size(queued[n].req)
				if n > 0 && (items+i > c.maxItems || bytes+b > c.maxBytes) {
					break
				}
				items, bytes, n = items+i, bytes+b, n+1
			}
			batch := queued[:n:n]
			queued = queued[n:]
			c.waiting.Store(int64(len(queued)))
			inFlight++
			proposes.Add(1)
			go func() {
				defer proposes.Done()
				c.apply(batch)
				finished <- struct{}{}
			}()
		}
		select {
		case p := <-c.in:
			queued = append(queued, p)
			c.waiting.Store(int64(len(queued)))
		case <-finished:
			inFlight--
		case <-c.stop:
			return
		}
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
	offset := 0
	for i, p := range batch {
		if err == nil && res.Failure() != nil {
			err = res.Failure()
		}
		// Sized before finish: once answered, p is its caller's again.
		items, _ := c.size(p.req)
		p.finish(batchOutcome{res: res, pos: i, offset: offset, err: err})
		offset += items
	}
}
