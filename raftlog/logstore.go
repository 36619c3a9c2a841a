package raftlog

import (
	"fmt"
	"runtime"

	"github.com/hashicorp/raft"
)

// CompactChunk is how many log entries one bolt transaction deletes when
// the log is compacted after a snapshot. Bolt has a single writer, so while
// a deletion commits, the leader's next StoreLogs (the fsync every client
// write waits for) queues behind it; a compaction of thousands of 100 KiB
// entries in one transaction held it for tens of milliseconds.
const CompactChunk = 128

// Chunked deletes the head of the log in bounded transactions.
// Raft compacts with DeleteRange(FirstIndex, n) after a snapshot; deleting
// that prefix in ascending chunks leaves, after each chunk and after a
// crash between chunks, a contiguous suffix of the log, i.e. exactly the
// state a smaller compaction would have left. Any other range (a follower
// truncating a conflicting tail) is passed through in one call, because
// deleting a tail from below would leave a hole if interrupted.
type Chunked struct {
	raft.LogStore
	chunk uint64
}

func NewChunked(s raft.LogStore, chunk uint64) *Chunked {
	return &Chunked{LogStore: s, chunk: max(chunk, 1)}
}

// IsMonotonic implements raft.MonotonicLogStore for the store under it.
func (s *Chunked) IsMonotonic() bool { return Monotonic(s.LogStore) }

// DeleteRange implements raft.LogStore.
func (s *Chunked) DeleteRange(lo, hi uint64) error {
	first, err := s.FirstIndex()
	if err != nil {
		return fmt.Errorf("delete logs %d-%d: first index: %w", lo, hi, err)
	}
	if lo > first || hi < lo || hi-lo < s.chunk {
		return s.LogStore.DeleteRange(lo, hi)
	}
	for from := lo; ; from += s.chunk {
		to := min(hi, from+s.chunk-1)
		if err := s.LogStore.DeleteRange(from, to); err != nil {
			return fmt.Errorf("delete logs %d-%d: %w", from, to, err)
		}
		if to == hi {
			return nil
		}
		// Let a StoreLogs waiting for the bolt writer lock go first.
		runtime.Gosched()
	}
}
