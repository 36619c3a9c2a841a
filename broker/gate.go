package broker

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrOverloaded: the node already holds as many bytes of client writes
// waiting for Raft as it may (Config.MaxPendingBytes). Nothing was
// proposed; the client may retry later.
var ErrOverloaded = errors.New("node overloaded")

// DefaultMaxPendingBytes bounds the client writes a node holds in front of
// Raft (queued in the coalescers and in flight) when Config leaves it 0.
const DefaultMaxPendingBytes = 256 << 20

// pendingGate bounds the bytes of requests waiting in front of Raft on
// this node. Committed state is bounded by admission at apply; this bounds
// what has not been committed yet, which the coalescer queue and every
// concurrently served stream request would otherwise hold without limit.
// A request is admitted while the gate is empty whatever its size, so the
// bound is the limit plus one request, and a message the queue accepts is
// never refused for its size alone.
type pendingGate struct {
	limit int64
	used  atomic.Int64
}

// acquire admits n bytes or answers ErrOverloaded; every admitted acquire
// must be matched by one release(n).
func (g *pendingGate) acquire(n int64) error {
	for {
		cur := g.used.Load()
		if cur > 0 && cur+n > g.limit {
			return fmt.Errorf("%w: %d bytes of writes already wait for Raft here, the limit is %d (--max-pending-bytes); retry shortly", ErrOverloaded, cur, g.limit)
		}
		if g.used.CompareAndSwap(cur, cur+n) {
			return nil
		}
	}
}

func (g *pendingGate) release(n int64) { g.used.Add(-n) }
