// Package diskguard keeps a node from filling its data dir's disk: it
// measures the free space there and says whether a write that adds data
// may go ahead. See DESIGN.md beside this file.
package diskguard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNoSpace: a write that adds data was refused, or could not be
// stored, for lack of disk space on a node. Nothing was applied.
var ErrNoSpace = errors.New("not enough free disk space")

// ErrUnmeasured: free space cannot be measured on this platform.
var ErrUnmeasured = errors.New("free disk space is not measured on this platform")

// DefaultMinFree is the space a node keeps free on its data dir's file
// system when Config.MinFree is 0, besides room for its next snapshot.
const DefaultMinFree = 256 << 20

// Config sets up a Guard.
type Config struct {
	// Node names the node in errors and logs.
	Node string
	// Dir is the data dir whose file system is measured.
	Dir string
	// MinFree is the margin kept free (0 = DefaultMinFree): room for the
	// log entries that settle and drain queues, Raft's own bookkeeping
	// and anything else on the file system.
	MinFree uint64
	// Reserve is the space to keep free on top of MinFree now: the size
	// of the node's next snapshot, written before an older one is
	// removed, and the next log segment the wal allocates whole. nil =
	// none.
	Reserve func() uint64
	// Free measures dir's free space; nil = Free (statfs).
	Free func(dir string) (uint64, error)
}

// Reading is one measurement.
type Reading struct {
	Free uint64 // bytes available on the file system
	// Limit is what must stay free: MinFree plus the reserve.
	Limit   uint64
	Reserve uint64
	// Low: Free is below Limit; writes that add data are refused.
	Low bool
}

// Guard measures a data dir's free space against its limit. It is safe
// for concurrent use.
type Guard struct {
	cfg Config

	mu   sync.Mutex
	last Reading
	ok   bool // last holds a measurement
}

// New returns a guard for cfg.Dir.
func New(cfg Config) *Guard {
	if cfg.MinFree == 0 {
		cfg.MinFree = DefaultMinFree
	}
	if cfg.Free == nil {
		cfg.Free = Free
	}
	return &Guard{cfg: cfg}
}

// MinFree is the configured margin.
func (g *Guard) MinFree() uint64 { return g.cfg.MinFree }

// Measure reads the free space now. ok is false when it cannot be
// measured (the platform, or statfs failing): the guard then refuses
// nothing, and the caller reports nothing.
func (g *Guard) Measure() (r Reading, ok bool) {
	free, err := g.cfg.Free(g.cfg.Dir)
	if err != nil {
		return Reading{}, false
	}
	r = Reading{Free: free, Limit: g.cfg.MinFree}
	if g.cfg.Reserve != nil {
		r.Reserve = g.cfg.Reserve()
		r.Limit += r.Reserve
	}
	r.Low = r.Free < r.Limit
	g.mu.Lock()
	g.last, g.ok = r, true
	g.mu.Unlock()
	return r, true
}

// Last is the most recent measurement (ok false before the first).
func (g *Guard) Last() (Reading, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last, g.ok
}

// Check measures now and answers nil if a write that adds data may go
// ahead, else an error wrapping ErrNoSpace that names the node, the dir
// and the figures.
func (g *Guard) Check() error {
	r, ok := g.Measure()
	if !ok || !r.Low {
		return nil
	}
	return g.refusal(r)
}

func (g *Guard) refusal(r Reading) error {
	return fmt.Errorf("%w on node %s: its data dir %s has %s free, below the %s it keeps free (--min-free-disk-bytes %s + %s for its next snapshot and log segment); writes that add data are refused until space is freed, reads, acks and nacks still work",
		ErrNoSpace, g.cfg.Node, g.cfg.Dir, Human(r.Free), Human(r.Limit), Human(g.cfg.MinFree), Human(r.Reserve))
}

// Run measures every interval until ctx ends, and calls changed with
// each reading whose Low differs from the one before (the first reading
// counts as a change only when low).
func (g *Guard) Run(ctx context.Context, interval time.Duration, changed func(Reading)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	low := false
	for {
		if r, ok := g.Measure(); ok && r.Low != low {
			low = r.Low
			changed(r)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Human renders a byte count in binary units ("12.5 MiB").
func Human(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
