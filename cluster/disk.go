package cluster

import (
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/raft"
)

// SetDiskLow publishes in gossip whether this node's data dir is short of
// free space, so that the leader can refuse writes a quorum could not
// store. The cluster package does not measure disks; its caller does.
func (n *Node) SetDiskLow(low bool) { n.ms.setDiskLow(low) }

// VoterDisks is what the current configuration's voters advertise about
// their disks.
type VoterDisks struct {
	Voters int
	// Low lists the voters (this node included) whose metadata says their
	// disk is low, sorted. A voter whose metadata is unknown is not
	// listed.
	Low []string
}

// CanStore reports whether a quorum of voters has room for new entries
// (true when the configuration is not known: no information, no refusal).
func (v VoterDisks) CanStore() bool { return v.Voters == 0 || v.Voters-len(v.Low) >= v.Voters/2+1 }

// VoterDisks returns the voters' advertised disk state.
func (n *Node) VoterDisks() VoterDisks {
	var v VoterDisks
	servers, err := latestServers(n.raft)
	if err != nil {
		return v
	}
	for _, s := range servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		v.Voters++
		if meta, ok := n.ms.meta(string(s.ID)); ok && meta.DiskLow {
			v.Low = append(v.Low, string(s.ID))
		}
	}
	slices.Sort(v.Low)
	return v
}

// spaceLogStore notices appends to the log that fail for lack of disk
// space (ENOSPC): it logs the first of each run of failures and the
// recovery, and remembers the error's text so that Apply can recognise
// it. raft's LogCache, above this store, flattens the error into a
// string (%q), so errors.Is cannot see the ENOSPC by the time raft
// answers the caller.
type spaceLogStore struct {
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
func (s *spaceLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }

// StoreLog implements raft.LogStore.
func (s *spaceLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore.
func (s *spaceLogStore) StoreLogs(logs []*raft.Log) error {
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

// isNoSpace reports whether err, as raft answered an Apply, is an append
// that failed for lack of disk space.
func (s *spaceLogStore) isNoSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	q := s.lastNoSpace.Load()
	return q != nil && strings.Contains(err.Error(), *q)
}
