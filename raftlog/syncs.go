package raftlog

import "sync"

// Syncs publishes when the log's fsyncs run, so that another writer on the
// same disk can start its own I/O between them instead of under them.
//
// Why (issue 24): every client write waits for the log's fsync, and an
// fsync that starts while a snapshot's writeback is on its way to the disk
// waits behind it (the disk's queue and cache flush; on ext4 the journal
// commit the fsync makes). The snapshot's write-behind
// (raftgroup/snapstore.go) waits until no log fsync is in progress before
// it starts each chunk's writeback.
//
// The zero value is ready; a nil *Syncs is never busy (a store that does
// not publish, e.g. bolt, whose fsyncs are inside bbolt).
type Syncs struct {
	mu       sync.Mutex
	inflight int
	// idle is closed when inflight drops to zero; nil while idle (then
	// Idle hands out closedChan).
	idle chan struct{}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// begin marks an fsync as started.
func (s *Syncs) begin() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.inflight++
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	s.mu.Unlock()
}

// end marks an fsync begun with begin as finished.
func (s *Syncs) end() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
}

// Idle returns a channel that is closed once no log fsync is in progress:
// already closed when none is.
func (s *Syncs) Idle() <-chan struct{} {
	if s == nil {
		return closedChan
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		return closedChan
	}
	return s.idle
}

// Busy reports whether a log fsync is in progress.
func (s *Syncs) Busy() bool {
	select {
	case <-s.Idle():
		return false
	default:
		return true
	}
}
