package raftlog

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/raft"
)

// Space notices appends to the log that fail for lack of disk
// space (ENOSPC): it logs the first of each run of failures and the
// recovery, and remembers the error's text so that Apply can recognise
// it. raft's LogCache, above this store, flattens the error into a
// string (%q), so errors.Is cannot see the ENOSPC by the time raft
// answers the caller.
type Space struct {
	raft.LogStore
	log *slog.Logger
	dir string

	failing atomic.Bool
	// lastNoSpace is the last ENOSPC append error's text as LogCache
	// quotes it; never cleared, so that an answer read after a later
	// append succeeded is still recognised.
	lastNoSpace atomic.Pointer[string]
}

// IsMonotonic implements raft.MonotonicLogStore for the store under it:
// the wal allows no gaps, and raft must hear so through every wrapper.
func (s *Space) IsMonotonic() bool { return Monotonic(s.LogStore) }

// StoreLog implements raft.LogStore.
func (s *Space) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore.
func (s *Space) StoreLogs(logs []*raft.Log) error {
	err := s.LogStore.StoreLogs(logs)
	switch {
	case err == nil:
		if s.failing.Swap(false) {
			s.log.Info("appending to the Raft log works again: the data dir's disk has room", "dir", s.dir)
		}
	case errors.Is(err, syscall.ENOSPC):
		q := strconv.Quote(err.Error())
		s.lastNoSpace.Store(&q)
		if !s.failing.Swap(true) {
			s.log.Error("cannot append to the Raft log: no space left on the data dir's disk. A leader refuses the write and steps down; a follower falls behind until space is freed. Nothing acknowledged is lost; the node recovers by itself once there is room",
				"dir", s.dir, "entries", len(logs), "err", err)
		}
	}
	return err
}

// IsNoSpace reports whether err, as raft answered an Apply, is an append
// that failed for lack of disk space.
func (s *Space) IsNoSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	q := s.lastNoSpace.Load()
	return q != nil && strings.Contains(err.Error(), *q)
}

// NewSpace wraps under, logging to log about the data dir dir.
func NewSpace(under raft.LogStore, log *slog.Logger, dir string) *Space {
	return &Space{LogStore: under, log: log, dir: dir}
}
