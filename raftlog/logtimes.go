package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// LogLatencyBuckets are the upper bounds, in seconds, of the log store
// histograms: 100 µs doubling to ~3.3 s.
func LogLatencyBuckets() []float64 {
	b := make([]float64, 16)
	for i := range b {
		b[i] = 0.0001 * float64(uint(1)<<i)
	}
	return b
}

// Histogram is a snapshot of one latency histogram: Counts[i] is how many
// observations were at most LogLatencyBuckets()[i] (cumulative, as
// Prometheus wants them).
type Histogram struct {
	Count  uint64
	Sum    float64 // seconds
	Counts []uint64
}

// LogStoreStats times the appends to the Raft log on this node's disk.
type LogStoreStats struct {
	// Append is each StoreLogs call: the entries encoded, written and
	// fsynced (what a commit waits for here).
	Append Histogram
	// Fsync is the disk part of each append. With bolt, as bbolt times
	// it: writing the transaction's pages and fdatasync, then the meta
	// page and its fdatasync. With wal: writing the batch's frames to
	// the segment file and its fsync.
	Fsync Histogram
}

// hist accumulates one histogram; guarded by its owner's mutex.
type hist struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	count  uint64
	sum    float64
}

func newHist() hist {
	b := LogLatencyBuckets()
	return hist{bounds: b, counts: make([]uint64, len(b)+1)}
}

func (h *hist) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(h.bounds) && s > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.count++
	h.sum += s
}

func (h *hist) snapshot() Histogram {
	out := Histogram{Count: h.count, Sum: h.sum, Counts: make([]uint64, len(h.bounds))}
	var cum uint64
	for i := range h.bounds {
		cum += h.counts[i]
		out.Counts[i] = cum
	}
	return out
}

// Timed times the appends of the log store under it. diskTime is
// the store's own running total of time spent writing and syncing (bbolt's
// statistics, or the wal's files as timedVFS counts them); appends are
// serialized here so that the difference read around one append is that
// append's (Raft has one log writer anyway; a compaction's deletes are
// other writes, counted as they commit, outside).
type Timed struct {
	raft.LogStore
	diskTime func() time.Duration

	mu             sync.Mutex
	append, fsyncs hist
}

func NewTimed(s raft.LogStore, diskTime func() time.Duration) *Timed {
	return &Timed{LogStore: s, diskTime: diskTime, append: newHist(), fsyncs: newHist()}
}

// StoreLog implements raft.LogStore.
func (s *Timed) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore.
func (s *Timed) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.diskTime()
	start := time.Now()
	err := s.LogStore.StoreLogs(logs)
	took := time.Since(start)
	if err != nil {
		return err
	}
	s.append.observe(took)
	s.fsyncs.observe(max(s.diskTime()-before, 0))
	return nil
}

// IsMonotonic implements raft.MonotonicLogStore for the store under it:
// raft.LogCache asks the store it wraps, and a store that allows no gap
// (the wal) must be emptied, not left with a gap, after a snapshot is
// installed.
func (s *Timed) IsMonotonic() bool { return Monotonic(s.LogStore) }

func Monotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// DeleteRange implements raft.LogStore, serialized with appends so that an
// append's disk time does not take in a deletion's.
func (s *Timed) DeleteRange(lo, hi uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.LogStore.DeleteRange(lo, hi)
}

func (s *Timed) Stats() LogStoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return LogStoreStats{Append: s.append.snapshot(), Fsync: s.fsyncs.snapshot()}
}
