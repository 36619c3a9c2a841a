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

// Samples are the phase samples so far (start, middle, end), by phase
// then node.
func (s *Sampler) Samples() []Resources {
	s.mu.Lock()
	defer s.mu.Unlock()
	order := map[string]int{soakPhaseStart: 0, soakPhaseMiddle: 1, soakPhaseEnd: 2}
	var out []Resources
	for _, r := range s.s {
		if r.Phase != soakPhaseRun {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b Resources) int {
		return cmp.Or(cmp.Compare(order[a.Phase], order[b.Phase]), cmp.Compare(a.Node, b.Node))
	})
	return out
}

// Series are the periodic samples so far, in time order.
func (s *Sampler) Series() []Resources {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Resources
	for _, r := range s.s {
		if r.Phase == soakPhaseRun {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b Resources) int { return a.At.Compare(b.At) })
	return out
}

// tick records one periodic sample of every node; a node that cannot be
// read now (paused, down) is recorded as missing, not waited for.
func (s *Sampler) tick(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range s.c.Nodes {
		wg.Go(func() {
			r, err := sampleNode(ctx, s.c, n)
			r.Node, r.Phase, r.OK = n.ID, soakPhaseRun, err == nil
			if err != nil {
				r.At, r.Err = time.Now(), err.Error()
			}
			s.mu.Lock()
			s.s = append(s.s, r)
			s.mu.Unlock()
		})
	}
	wg.Wait()
}

// WaitSteady samples every soakEvery until the backlog and every node's
// RSS are steady (BaselineSteady), at least least and at most most; it
// says how the wait ended.
func (s *Sampler) WaitSteady(ctx context.Context, least, most time.Duration) string {
	t0 := time.Now()
	var nodes []string
	for _, n := range s.c.Nodes {
		nodes = append(nodes, n.ID)
	}
	why := "no sample"
	for ctx.Err() == nil {
		s.tick(ctx)
		var ok bool
		if ok, why = BaselineSteady(s.Series(), nodes); ok && time.Since(t0) >= least {
			return fmt.Sprintf("steady after %v (every node's RSS, state and backlog set no new high past %.0f%% over its last %d samples, %v apart)",
				time.Since(t0).Round(time.Second), 100*steadyFrac, steadyWindow, soakEvery)
		}
		if time.Since(t0) >= most {
			break
		}
		if harness.Sleep(ctx, soakEvery) != nil {
			break
		}
	}
	return fmt.Sprintf("NOT steady after %v (%s); taken anyway", time.Since(t0).Round(time.Second), why)
}

// SaveHeapProfiles writes every node's heap profile into dir as
// PREFIX-NODE-heap.pb.gz (read it with go tool pprof); a node that does
// not answer is skipped with a warning in the returned list.
func (s *Sampler) SaveHeapProfiles(ctx context.Context, dir string) []string {
	var notes []string
	for _, n := range s.c.Nodes {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := s.c.HeapProfile(cctx, n)
		cancel()
		if err == nil {
			prefix := "soak"
			if s.c.Net != nil {
				prefix = s.c.Net.Prefix
			}
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-heap.pb.gz", prefix, n.ID)), b, 0o644)
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: heap profile: %v", n.ID, err))
		}
	}
	return notes
}

// Run samples every soakEvery until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	for harness.Sleep(ctx, soakEvery) == nil {
		s.tick(ctx)
	}
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
	r.Pid, r.At = pid, time.Now()
	if r.RSSBytes, r.RSSAnon, r.RSSFile, err = procRSS(pid); err != nil {
		return r, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return r, err
	}
	r.OpenFiles = len(fds)
	if err := readMetrics(ctx, c, n, &r); err != nil {
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

// procRSS is VmRSS of /proc/PID/status and its anonymous and file-backed
// parts (RssAnon, RssFile), in bytes.
func procRSS(pid int) (rss, anon, file int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	var found bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, field := range []struct {
			name string
			dst  *int64
		}{{"VmRSS:", &rss}, {"RssAnon:", &anon}, {"RssFile:", &file}} {
			if rest, ok := strings.CutPrefix(sc.Text(), field.name); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err != nil {
					return 0, 0, 0, fmt.Errorf("%s %q: %w", field.name, rest, err)
				}
				*field.dst = kb << 10
				found = found || field.name == "VmRSS:"
			}
		}
	}
	if !found {
		return 0, 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	return rss, anon, file, nil
}

// readMetrics fills r's figures from the node's /metrics: goroutines,
// the Go runtime's memory and the size of the replicated state.
func readMetrics(ctx context.Context, c *Cluster, n *Node, r *Resources) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := c.Metrics(cctx, n)
	if err != nil {
		return err
	}
	return parseMetrics(m, r)
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
