package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/broker"
)

// testClock is the wall clock shifted by an offset read from a file, for
// the chaos campaign's clock jumps only (the hidden --test-clock-offset-file
// flag): nodes on one host share the wall clock, and the campaign must set
// one node's clock minutes off, forwards or back, while it runs. Only the
// wall reading moves; Elapsed reads the monotonic clock, as the real wall
// clock's steps leave the kernel's monotonic clock alone. The broker reads
// its time through this clock (broker.Config.Clock); libraries that call
// time.Now themselves (TLS, Raft, gossip) see the host's clock.
//
// Without the flag the node uses the broker's own wall clock: nothing of
// this is on a production path.
type testClock struct {
	path   string
	start  time.Time
	offset atomic.Int64 // nanoseconds
	log    *slog.Logger
}

// testClockPoll is how often the offset file is read again.
const testClockPoll = 100 * time.Millisecond

// newTestClock reads path once (so the node's first reading already has
// the offset) and returns the clock; watch keeps it current.
func newTestClock(path string, log *slog.Logger) (*testClock, error) {
	c := &testClock{path: path, start: time.Now(), log: log}
	d, err := readClockOffset(path)
	if err != nil {
		return nil, fmt.Errorf("--test-clock-offset-file: %w", err)
	}
	c.offset.Store(int64(d))
	log.Warn("test clock: the wall clock is offset (test-only flag)", "offset", d, "file", path)
	return c, nil
}

// Now is the wall clock plus the offset, without a monotonic reading (as
// a stepped system clock reads).
func (c *testClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.offset.Load()))
}

// Elapsed is monotonic time since the clock was made: never offset.
func (c *testClock) Elapsed() time.Duration { return time.Since(c.start) }

// watch reads the file every testClockPoll until ctx ends; a changed
// offset is a jump of the node's wall clock while it runs, logged so the
// campaign can tell the node saw it. An unreadable file keeps the last
// offset.
func (c *testClock) watch(ctx context.Context) {
	t := time.NewTicker(testClockPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d, err := readClockOffset(c.path)
		if err != nil {
			continue
		}
		if old := time.Duration(c.offset.Swap(int64(d))); old != d {
			c.log.Warn("test clock: wall clock jumped", "offset", d, "was", old)
		}
	}
}

// readClockOffset reads a Go duration ("-3m", "90s"); a missing or empty
// file is no offset.
func readClockOffset(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// The broker holds a Monotonic clock steady (its wall reading is taken
// once, at start): a jump of a running node's clock moves none of the
// broker's times, and a restart reads the jumped clock afresh. A clock
// without Elapsed would be read as it is, jumps and all.
var _ broker.Monotonic = (*testClock)(nil)
