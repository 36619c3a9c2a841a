package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/raft-wal/metadb"

	"github.com/hashicorp/raft"
)

// castagnoli is CRC32C's table (what raft-wal's commit frames use).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logSumMagic opens the Extensions of every entry Checked
// writes: the 4 bytes, the entry's CRC32C (little endian), then the
// entry's own Extensions. raft-wal checksums a batch only at its commit
// frame, and only the last batch of the tail at open; its reads and
// bolt's check nothing. raftq's entries carry no Extensions of their own,
// and the envelope never leaves this node: it is added under raft's
// LogCache when an entry is stored and taken off when it is read, so
// raft, the FSM and the entries sent to peers never see it.
const logSumMagic = "rqs\x01"

// logSumLen is the envelope's length before the entry's own Extensions.
const logSumLen = len(logSumMagic) + 4

// logSum is the CRC32C of what an entry means: its index, term, type,
// data and (own) extensions. AppendedAt is left out: it is metadata raft
// uses for metrics, and bolt's msgpack does not keep it to the bit.
func logSum(l *raft.Log, ext []byte) uint32 {
	var hdr [8 + 8 + 1 + 8 + 8]byte
	binary.LittleEndian.PutUint64(hdr[0:], l.Index)
	binary.LittleEndian.PutUint64(hdr[8:], l.Term)
	hdr[16] = byte(l.Type)
	binary.LittleEndian.PutUint64(hdr[17:], uint64(len(l.Data)))
	binary.LittleEndian.PutUint64(hdr[25:], uint64(len(ext)))
	h := crc32.New(castagnoli)
	_, _ = h.Write(hdr[:])
	_, _ = h.Write(l.Data)
	_, _ = h.Write(ext)
	return h.Sum32()
}

// sealLog returns a copy of l whose Extensions carry its checksum. l
// itself is not changed: raft's LogCache keeps the pointer it passed.
func sealLog(l *raft.Log) *raft.Log {
	c := *l
	ext := make([]byte, logSumLen+len(l.Extensions))
	copy(ext, logSumMagic)
	binary.LittleEndian.PutUint32(ext[len(logSumMagic):], logSum(l, l.Extensions))
	copy(ext[logSumLen:], l.Extensions)
	c.Extensions = ext
	return &c
}

// openLog checks and removes the envelope sealLog added. An entry without
// one was written before raftq checksummed entries: it is returned as it
// is (the wal's start-up check covers it through the commit frames).
func openLog(l *raft.Log) (sealed bool, err error) {
	if len(l.Extensions) < logSumLen || !bytes.Equal(l.Extensions[:len(logSumMagic)], []byte(logSumMagic)) {
		return false, nil
	}
	want := binary.LittleEndian.Uint32(l.Extensions[len(logSumMagic):])
	ext := l.Extensions[logSumLen:]
	if len(ext) == 0 {
		ext = nil
	}
	if got := logSum(l, ext); got != want {
		return true, fmt.Errorf("entry checksum mismatch: stored %08x, computed %08x", want, got)
	}
	l.Extensions = ext
	return true, nil
}

// Checked checks every entry read from the log store under it
// (sealLog's CRC32C, and that the entry is the one asked for) and seals
// every entry written. A read that fails any check, or fails at all
// other than with ErrLogNotFound, is corruption: it is reported
// (onCorrupt), raft is shut down (without waiting: the reader may be
// raft's own goroutine), so that the node neither votes nor appends from
// here on, and then:
//   - when raft's own goroutine is applying committed entries
//     (processLogs, which panics on any read error), that goroutine ends
//     (runtime.Goexit, which runs raft's deferred clean-up): the node stops
//     at once instead of crashing or applying anything after the corrupt
//     entry;
//   - any other reader (replication to a peer, the previous-entry check of
//     an append, the start-up check) gets the error, which raft treats as
//     a failed RPC.
type Checked struct {
	raft.LogStore
	// File names the store in reports ("wal", raft.db's path).
	File string
	// OnCorrupt is told of every corrupt read (it reports the first).
	OnCorrupt func(*Corruption)
	// StopRaft shuts raft down without waiting (nil before raft runs).
	StopRaft func()
}

// IsMonotonic implements raft.MonotonicLogStore for the store under it.
func (s *Checked) IsMonotonic() bool { return Monotonic(s.LogStore) }

// StoreLog implements raft.LogStore.
func (s *Checked) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore.
func (s *Checked) StoreLogs(logs []*raft.Log) error {
	sealed := make([]*raft.Log, len(logs))
	for i, l := range logs {
		sealed[i] = sealLog(l)
	}
	return s.LogStore.StoreLogs(sealed)
}

// GetLog implements raft.LogStore.
func (s *Checked) GetLog(index uint64, l *raft.Log) error {
	c := s.check(index, l)
	if c == nil {
		return nil
	}
	if errors.Is(c.Err, raft.ErrLogNotFound) {
		return c.Err
	}
	s.OnCorrupt(c)
	if s.StopRaft != nil {
		s.StopRaft()
		if inRaftApply() {
			runtime.Goexit()
		}
	}
	return c
}

// check reads index into l and checks it; nil when it is sound.
func (s *Checked) check(index uint64, l *raft.Log) *Corruption {
	err := s.LogStore.GetLog(index, l)
	if errors.Is(err, raft.ErrLogNotFound) {
		return &Corruption{Err: err}
	}
	if err == nil && l.Index != index {
		err = fmt.Errorf("asked for entry %d, read entry %d", index, l.Index)
	}
	if err == nil {
		_, err = openLog(l)
	}
	if err == nil {
		return nil
	}
	c := &Corruption{File: s.File, Offset: -1, Index: index, Reason: err.Error(), Err: err}
	var ce *Corruption
	if errors.As(err, &ce) { // a store that knows the file and offset
		c.File, c.Offset = ce.File, ce.Offset
	}
	return c
}

// inRaftApply reports whether the caller is raft applying committed
// entries or reading its log at start-up: the reads raft panics on.
func inRaftApply() bool {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/hashicorp/raft.(*Raft).processLogs") {
			return true
		}
		if !more {
			return false
		}
	}
}

var _ raft.MonotonicLogStore = (*Checked)(nil)

// VerifyEntries reads every entry of s through its checks.
func (s *Checked) VerifyEntries() *Corruption {
	first, err := s.FirstIndex()
	if err == nil {
		var last uint64
		if last, err = s.LastIndex(); err == nil {
			for i := first; i > 0 && i <= last; i++ {
				var l raft.Log
				if c := s.check(i, &l); c != nil {
					if errors.Is(c.Err, raft.ErrLogNotFound) {
						c.Reason = "entry missing inside the log"
					}
					c.At = time.Now()
					return c
				}
			}
			return nil
		}
	}
	return &Corruption{File: s.File, Offset: -1, Reason: err.Error(), Err: err, At: time.Now()}
}

// VerifyLogFiles checks the wal segments of dataDir's Raft log, when the
// log is the wal (before raft-wal opens them and would trust them): the
// damage found, nil if none. A bolt log is checked entry by entry once
// open (VerifyEntries).
func VerifyLogFiles(dataDir string) (*Corruption, error) {
	dbExists, marked, err := readRaftDB(filepath.Join(dataDir, RaftDBFile))
	if err != nil {
		return nil, fmt.Errorf("raft.db: %w", err)
	}
	dir := filepath.Join(dataDir, WALDir)
	if _, err := os.Stat(filepath.Join(dir, metadb.FileName)); err == nil && (marked || !dbExists) {
		return VerifyWAL(dir), nil
	}
	return nil, nil
}
