package raftlog

import "github.com/hashicorp/raft"

// Watched tells the snapshot watch where the log ends after
// every append.
type Watched struct {
	raft.LogStore
	Appended func(last uint64)
}

// IsMonotonic implements raft.MonotonicLogStore for the store under it.
func (s *Watched) IsMonotonic() bool { return Monotonic(s.LogStore) }

// StoreLog implements raft.LogStore.
func (s *Watched) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore.
func (s *Watched) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	if err == nil && len(logs) > 0 {
		s.Appended(logs[len(logs)-1].Index)
	}
	return err
}
