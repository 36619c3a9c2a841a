package raftgroup

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftlog"
)

// writeBehindChunk is how many snapshot bytes may be written before their
// writeback to disk is started; at most two chunks are dirty at a time.
//
// Small, because every Raft log fsync made while a chunk is on its way to
// disk waits behind it (same disk, and ext4's ordered mode makes the
// journal commit of the log's fsync wait for the snapshot blocks just
// allocated). Measured on this machine (a 4 KiB append + fsync every 5 ms
// while 512 MiB were written, three runs each, issue 24): with 4 MiB chunks
// the log's fsync took p50 7-9 ms, p90 25-35 ms; with 256 KiB, p50 1.8-3
// ms, p90 4-14 ms, and the file was written as fast (0.5-0.8 s).
const writeBehindChunk = 256 << 10

// maxLogSyncWait bounds how long a chunk's writeback waits for the log's
// fsync in progress (logSyncs): a log fsync stuck on the disk delays the
// snapshot by at most this much per chunk, not for as long as it lasts.
const maxLogSyncWait = 50 * time.Millisecond

// logSyncs says when the Raft log's fsyncs run (raftlog.Syncs; a fake in
// tests). Idle is closed once none is in progress.
type logSyncs interface {
	Idle() <-chan struct{}
}

// writeBehindStore is raft's FileSnapshotStore with write-behind: the state
// file's pages are sent to disk as the snapshot is written, a chunk at a
// time between the Raft log's fsyncs, instead of all at once by the sink's
// final fsync.
//
// Why: a snapshot of a million 1 KiB messages is ~1 GiB. Written through the
// page cache it stays dirty (below the kernel's background threshold) until
// FileSnapshotSink.Close fsyncs it; that flush took ~0.7 s, and every Raft
// log fsync (bolt's commit in StoreLogs, which each client write waits for)
// queued behind it on the disk, stalling writes for hundreds of
// milliseconds. With write-behind, the log's fsync waits for at most a
// couple of chunks, and no chunk's writeback is started while a log fsync
// is in progress: it waits for that fsync to end first. Durability is unchanged: the final fsync of the state
// file, its metadata and the directory still happen in Close.
//
// FileSnapshotSink keeps its file handle to itself, so the state file is
// opened a second time by path (raft's layout: <dir>/snapshots/<id>.tmp/state.bin).
// If that path does not exist (a raft upgrade changed the layout) the sink
// writes without write-behind and a warning is logged; snapshots still
// work, and are still counted and reported (onWritten).
type writeBehindStore struct {
	*raft.FileSnapshotStore
	dir   string // the snapshots directory
	chunk int64
	log   *slog.Logger
	stats *snapshotCounter // may be nil
	// onCorrupt is told of a snapshot that fails its CRC when raft opens
	// it (to send it to a follower); nil: not told.
	onCorrupt func(*raftlog.Corruption)
	// onWritten is told the index of every snapshot written to the store
	// (taken here or installed from a leader); nil: not told.
	onWritten func(index uint64)
	// syncs paces the writeback by the log's fsyncs; nil: not paced.
	syncs logSyncs
}

// Open implements raft.SnapshotStore. raft's store reads the whole state
// file for its CRC first; a mismatch is this node's snapshot corrupt
// (raft would only log it, and fail every send of it to a follower).
func (s *writeBehindStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil && s.onCorrupt != nil && strings.Contains(err.Error(), "CRC mismatch") {
		s.onCorrupt(&raftlog.Corruption{File: filepath.Join(s.dir, id, snapshotStateFile), Offset: -1,
			Reason: "snapshot state file fails its CRC-64: " + err.Error(), Err: err})
	}
	return meta, rc, err
}

// Create implements raft.SnapshotStore.
func (s *writeBehindStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	wb := &writeBehindSink{SnapshotSink: sink, chunk: s.chunk, log: s.log, stats: s.stats, start: time.Now(), index: index, onWritten: s.onWritten,
		syncs: s.syncs, syncWait: maxLogSyncWait, startback: startWriteback, waitback: waitWriteback}
	path := filepath.Join(s.dir, sink.ID()+".tmp", "state.bin")
	if wb.f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
		// Still counted and reported when written, without write-behind.
		wb.f = nil
		s.log.Warn("snapshot write-behind disabled: cannot open the state file", "path", path, "err", err)
	}
	return wb, nil
}

// writeBehindSink passes writes to raft's sink and, every chunk bytes,
// starts writeback of the newest chunk and waits for the one before it.
// Waiting paces the snapshot to the disk and keeps at most two chunks dirty.
// A chunk's writeback starts between the log's fsyncs: when one is in
// progress, the chunk waits for it to end (at most syncWait), so that the
// fsync is not queued behind the chunk.
type writeBehindSink struct {
	raft.SnapshotSink
	f     *os.File // the state file, opened again; nil once closed or disabled
	chunk int64
	log   *slog.Logger
	stats *snapshotCounter // may be nil
	start time.Time
	// index is the snapshot's; onWritten is told it once the snapshot
	// is in the store (nil: not told).
	index     uint64
	onWritten func(index uint64)
	// counted: the snapshot was recorded in stats (Close may be repeated).
	counted bool
	// syncs: the log's fsyncs, which each chunk's writeback waits out
	// for at most syncWait; nil: not paced.
	syncs    logSyncs
	syncWait time.Duration
	// startback starts the writeback of a range of f, waitback waits for
	// it (startWriteback, waitWriteback; recorders in tests).
	startback, waitback func(f *os.File, off, n int64) error

	written int64 // bytes accepted by the inner sink
	started int64 // writeback started for [0, started)
	waited  int64 // writeback waited for on [0, waited)
	// pacedWaits counts the chunks that waited for a log fsync to end;
	// pacedTimeouts those whose wait ran out (maxLogSyncWait).
	pacedWaits, pacedTimeouts int
}

func (s *writeBehindSink) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		piece := p
		if s.f != nil {
			// A write larger than what is left of the chunk goes in pieces,
			// so that no write puts more than two chunks in flight (the FSM
			// writes 1 MiB at a time).
			if room := s.chunk - (s.written - s.started); int64(len(piece)) > room {
				piece = piece[:max(room, 1)]
			}
		}
		n, err := s.writePiece(piece)
		total += n
		if err == nil && n < len(piece) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return total, err
		}
		p = p[n:]
	}
	return total, nil
}

// writePiece writes p through and starts (and waits for) writeback when a
// chunk is full.
func (s *writeBehindSink) writePiece(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	s.written += int64(n)
	if errors.Is(err, syscall.ENOSPC) {
		// raft cancels the snapshot (its files are removed) and tries
		// again at the next interval; until then the log is not compacted.
		s.log.Error("snapshot failed: no space left on the data dir's disk; the Raft log is not compacted until space is freed (nothing acknowledged is lost)",
			"written", s.written, "err", err)
	}
	if s.f != nil && s.written-s.started >= s.chunk {
		// The inner sink buffers a few KiB, so the file may be slightly
		// behind s.written; those pages go with the next chunk or the final
		// fsync.
		if werr := s.writeBehind(); werr != nil {
			// Only an optimisation: the final fsync still decides whether the
			// snapshot is durable, and reports any I/O error.
			s.log.Warn("snapshot write-behind disabled", "err", werr)
			s.closeFile()
		}
	}
	return n, err
}

func (s *writeBehindSink) writeBehind() error {
	s.waitLogSync()
	end := s.written
	if err := s.startback(s.f, s.started, end-s.started); err != nil {
		return err
	}
	if s.started > s.waited {
		if err := s.waitback(s.f, s.waited, s.started-s.waited); err != nil {
			return err
		}
		s.waited = s.started
	}
	s.started = end
	// Yield the processor once per chunk (~0.3-1 ms of the writer's CPU:
	// CRC-64, marshalling, copies). On a 2-core node the writer and one
	// other CPU-bound goroutine (the counter audit recounting a
	// million-message queue, issue 24's trace) held both Ps, and a client
	// write's goroutines each waited for Go's 10 ms preemption.
	runtime.Gosched()
	return nil
}

// waitLogSync returns once no log fsync is in progress, or after
// syncWait. It waits for the fsync it found only, not for the log to
// be idle: under a steady write load the log fsyncs back to back, and the
// snapshot still goes on, one chunk per log fsync at least.
func (s *writeBehindSink) waitLogSync() {
	if s.syncs == nil {
		return
	}
	idle := s.syncs.Idle()
	select {
	case <-idle:
		return
	default:
	}
	s.pacedWaits++
	t := time.NewTimer(s.syncWait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		s.pacedTimeouts++
	}
}

func (s *writeBehindSink) closeFile() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Close implements raft.SnapshotSink: raft's Close flushes, fsyncs and
// renames the snapshot into place.
func (s *writeBehindSink) Close() error {
	ferr := s.closeFile()
	err := errors.Join(s.SnapshotSink.Close(), ferr)
	if err == nil && !s.counted {
		s.counted = true
		s.stats.record(s.written, time.Since(s.start))
		s.log.Debug("snapshot written", "index", s.index, "bytes", s.written, "took", time.Since(s.start),
			"chunks_paced_by_log_fsync", s.pacedWaits, "pacing_timeouts", s.pacedTimeouts)
		if s.onWritten != nil {
			s.onWritten(s.index)
		}
	}
	return err
}

// Cancel implements raft.SnapshotSink.
func (s *writeBehindSink) Cancel() error {
	ferr := s.closeFile()
	return errors.Join(s.SnapshotSink.Cancel(), ferr)
}

// logSyncsOf is the opened log's fsync publisher, or nil (bolt, whose
// fsyncs are inside bbolt, or no log opened: a quarantined group).
func logSyncsOf(l *raftlog.Opened) logSyncs {
	if l == nil || l.Syncs == nil {
		return nil
	}
	return l.Syncs
}
