//go:build linux

package chaos

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// Sampler records every node's resources at the soak's phases.
type Sampler struct {
	c  *Cluster
	mu sync.Mutex
	s  []Resources
}

// NewSampler samples c's nodes.
func NewSampler(c *Cluster) *Sampler { return &Sampler{c: c} }

// Sample records every node at phase. A node that is paused, stopped or
// does not answer is asked again until it can be read or 30 s pass (a
// fault may hold it); then its sample says why it is missing.
func (s *Sampler) Sample(ctx context.Context, phase string) {
	var wg sync.WaitGroup
	for _, n := range s.c.Nodes {
		wg.Go(func() {
			var r Resources
			err := harness.WaitFor(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
				var err error
				r, err = sampleNode(ctx, s.c, n)
				return err
			})
			r.Node, r.Phase, r.OK = n.ID, phase, err == nil
			if err != nil {
				r.Err = err.Error()
			}
			s.mu.Lock()
			s.s = append(s.s, r)
			s.mu.Unlock()
		})
	}
	wg.Wait()
}

// Samples are the samples so far, by phase then node.
func (s *Sampler) Samples() []Resources {
	s.mu.Lock()
	defer s.mu.Unlock()
	order := map[string]int{soakPhaseStart: 0, soakPhaseMiddle: 1, soakPhaseEnd: 2}
	out := append([]Resources(nil), s.s...)
	slices.SortStableFunc(out, func(a, b Resources) int {
		return cmp.Or(cmp.Compare(order[a.Phase], order[b.Phase]), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// sampleNode reads one running, unpaused node's figures.
func sampleNode(ctx context.Context, c *Cluster, n *Node) (Resources, error) {
	var r Resources
	if n.Paused() {
		return r, errors.New("paused")
	}
	pid, err := n.Pid()
	if err != nil {
		return r, err
	}
	r.Pid = pid
	if r.RSSBytes, err = procRSS(pid); err != nil {
		return r, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return r, err
	}
	r.OpenFiles = len(fds)
	if r.Goroutines, err = goroutines(ctx, c, n); err != nil {
		return r, err
	}
	r.DataBytes, err = dirBytes(n.DataDir)
	if err != nil {
		return r, err
	}
	wal, err := dirBytes(filepath.Join(n.DataDir, "wal"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, err
	}
	db, err := os.Stat(filepath.Join(n.DataDir, "raft.db"))
	r.LogBytes = wal
	if err == nil {
		r.LogBytes += db.Size()
	}
	return r, nil
}

// procRSS is VmRSS of /proc/PID/status, in bytes.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// goroutines is go_goroutines from the node's /metrics.
func goroutines(ctx context.Context, c *Cluster, n *Node) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := c.Metrics(cctx, n)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s: no go_goroutines in /metrics", n.ID)
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a snapshot replaced while we walk
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total, err
}
