package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// raft-wal's segment format (raft-wal/segment/format.go, v0.4.1): a 32
// byte file header, then 8-byte aligned frames, each an 8 byte header
// (type, 3 zero bytes, a length, or for a commit frame the CRC32C of
// everything since the previous commit frame: the first commit's covers
// the file header too) and its padded payload. A sealed segment ends
// with an index frame (a uint32 offset per entry) and a commit.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walMagic          = 0x58eb6b0d
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
	walMaxEntrySize   = 64 << 20
)

// VerifyWAL checks every segment of the wal in dir before it is opened.
// raft-wal trusts what it committed: it checks the CRC of the tail's
// last batch only, reads entries without any check, and stops reading the
// tail at the first frame it cannot parse, taking what follows for a torn
// write. So a bit flipped in a frame header, or a range zeroed or cut off
// in the middle of the tail, would silently end the log early, losing
// entries this node acknowledged (and a node that lost entries it
// acknowledged can elect a leader without them). This checks every
// commit frame's CRC in every segment, that a sealed segment is whole
// (its index frame where the metadata says), that the tail file has the
// size it was allocated with, and that nothing committed follows the
// point where the tail's readable part ends.
func VerifyWAL(dir string) *Corruption {
	meta := &metadb.BoltMetaDB{}
	st, err := meta.Load(dir)
	if err != nil {
		return &Corruption{File: filepath.Join(dir, metadb.FileName), Offset: -1, Reason: "wal metadata unreadable: " + err.Error(), Err: err, At: time.Now()}
	}
	_ = meta.Close()
	for i, si := range st.Segments {
		path := filepath.Join(dir, segment.FileName(si))
		tail := i == len(st.Segments)-1 && si.SealTime.IsZero()
		if c := verifySegment(path, si, tail); c != nil {
			c.At = time.Now()
			return c
		}
	}
	return nil
}

// verifySegment checks one segment file (see VerifyWAL).
func verifySegment(path string, si types.SegmentInfo, tail bool) *Corruption {
	bad := func(off int64, format string, args ...any) *Corruption {
		return &Corruption{File: path, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && tail {
		return nil // a rotation the crash cut short: created at open
	}
	if err != nil {
		return bad(-1, "segment unreadable: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return bad(-1, "segment unreadable: %v", err)
	}
	size := fi.Size()
	w := &segWalker{f: newWindowReader(f), size: size}
	hdr := make([]byte, walFileHeaderLen)
	n, _ := f.ReadAt(hdr, 0)
	if !tail || !allZero(hdr[:n]) {
		if n < walFileHeaderLen {
			return bad(0, "segment file is %d bytes, shorter than its header", size)
		}
		if binary.LittleEndian.Uint64(hdr[0:8]) != walMagic {
			return bad(0, "segment file header has no raft-wal magic")
		}
		if base, id := binary.LittleEndian.Uint64(hdr[8:16]), binary.LittleEndian.Uint64(hdr[16:24]); base != si.BaseIndex || id != si.ID {
			return bad(8, "segment file header names segment %d from index %d, the metadata %d from %d", id, base, si.ID, si.BaseIndex)
		}
	} else {
		return w.verifyEmptyTail(path, si)
	}
	end, entries, indexAt, c := w.walk(path)
	if c != nil {
		return c
	}
	if !tail {
		// A tail truncation seals the segment with a MaxIndex below what
		// it holds; a head truncation only raises MinIndex.
		want := si.MaxIndex + 1 - si.BaseIndex
		if want == 0 {
			return nil
		}
		if indexAt < 0 || uint64(indexAt)+walFrameHeaderLen != si.IndexStart {
			return bad(end, "sealed segment's readable part ends at offset %d without its index frame (at %d)", end, int64(si.IndexStart)-walFrameHeaderLen)
		}
		if entries < want {
			return bad(end, "sealed segment holds %d entries, its metadata says at least %d", entries, want)
		}
		return nil
	}
	if size < int64(si.SizeLimit) {
		return bad(size, "tail segment file is %d bytes, it was allocated %d: cut short", size, si.SizeLimit)
	}
	return w.verifyResidue(path, end)
}

// verifyEmptyTail checks a tail whose header was never written (nothing
// committed): it must hold nothing at all.
func (w *segWalker) verifyEmptyTail(path string, si types.SegmentInfo) *Corruption {
	if w.size > 0 && w.size < int64(si.SizeLimit) {
		// A rotation that met a full disk leaves the file short and
		// empty (ensureSegmentFile gives it its size).
		if off, ok := w.firstNonZero(0); ok {
			return &Corruption{File: path, Offset: off, Reason: "tail segment is cut short and has no header, but holds data"}
		}
		return nil
	}
	return w.verifyResidue(path, 0)
}

// segWalker reads one segment file's frames.
type segWalker struct {
	f    io.ReaderAt
	size int64
}

// walk reads the frames from the file header on, checking each commit's
// CRC, until a zero or unparsable frame header or the end of the file. It
// returns the offset just past the last good commit, the entries before
// it, the offset of an index frame it committed (-1: none), or the first
// commit whose CRC does not match: unless it is the last write of the tail
// torn by a crash, which verifyResidue tells apart, that is corruption.
func (w *segWalker) walk(path string) (end int64, entries uint64, indexAt int64, c *Corruption) {
	crc := crc32.New(castagnoli)
	head := make([]byte, walFileHeaderLen)
	_, _ = w.f.ReadAt(head, 0)
	_, _ = crc.Write(head)
	end, indexAt = walFileHeaderLen, -1
	off := int64(walFileHeaderLen)
	var pending uint64
	pendingIndex := int64(-1)
	var fh [walFrameHeaderLen]byte
	buf := make([]byte, 64<<10)
	for off+walFrameHeaderLen <= w.size {
		if _, err := w.f.ReadAt(fh[:], off); err != nil {
			break
		}
		typ, n := fh[0], binary.LittleEndian.Uint32(fh[4:8])
		if fh[1] != 0 || fh[2] != 0 || fh[3] != 0 || typ > walFrameCommit || typ == 0 {
			break
		}
		if typ == walFrameCommit {
			if crc.Sum32() != n {
				return end, entries, indexAt, &Corruption{File: path, Offset: end,
					Reason: fmt.Sprintf("batch at offsets %d-%d fails its commit CRC32C (stored %08x, computed %08x)", end, off, n, crc.Sum32())}
			}
			entries += pending
			if pendingIndex >= 0 {
				indexAt = pendingIndex
			}
			pending, pendingIndex = 0, -1
			off += walFrameHeaderLen
			end = off
			crc = crc32.New(castagnoli)
			continue
		}
		if n > walMaxEntrySize || off+walFrameHeaderLen+int64(n) > w.size {
			break
		}
		_, _ = crc.Write(fh[:])
		frame := int64(n) + int64(walPad(int(n)))
		for done := int64(0); done < frame; {
			chunk := min(int64(len(buf)), frame-done)
			if _, err := w.f.ReadAt(buf[:chunk], off+walFrameHeaderLen+done); err != nil && !errors.Is(err, io.EOF) {
				return end, entries, indexAt, &Corruption{File: path, Offset: off, Reason: "segment unreadable: " + err.Error()}
			}
			_, _ = crc.Write(buf[:chunk])
			done += chunk
		}
		if typ == walFrameEntry {
			pending++
		} else {
			pendingIndex = off
		}
		off += walFrameHeaderLen + frame
	}
	return end, entries, indexAt, nil
}

// verifyResidue checks that nothing committed follows end, where the
// tail's readable part stops. What may lie there is zeros (the file is
// allocated zeroed) or the last batch a crash tore (raft-wal overwrites
// it); a complete batch (entry frames, then a commit whose CRC matches
// them) after a gap means the log was cut in the middle: the entries
// from end on were lost.
func (w *segWalker) verifyResidue(path string, end int64) *Corruption {
	off, ok := w.firstNonZero(end)
	if !ok {
		return nil
	}
	found := func(start int64) *Corruption {
		return &Corruption{File: path, Offset: end,
			Reason: fmt.Sprintf("the log's readable part ends at offset %d, but committed entries follow at offset %d: damaged in the middle", end, start)}
	}
	// A batch begins where the data resumes after a gap, or right after
	// a commit frame: trying only those keeps this linear in the file.
	first := off - off%walFrameHeaderLen
	if w.committedBatchAt(first) {
		return found(first)
	}
	buf := make([]byte, 1<<20) // a multiple of the frame alignment
	for chunk := first; chunk < w.size; chunk += int64(len(buf)) {
		n, err := w.f.ReadAt(buf[:min(int64(len(buf)), w.size-chunk)], chunk)
		for i := 0; i+walFrameHeaderLen <= n; i += walFrameHeaderLen {
			if buf[i] == walFrameCommit && buf[i+1] == 0 && buf[i+2] == 0 && buf[i+3] == 0 {
				if at := chunk + int64(i) + walFrameHeaderLen; w.committedBatchAt(at) {
					return found(at)
				}
			}
		}
		if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
			return nil
		}
	}
	return nil
}

// committedBatchAt reports whether a batch starts at off: entry frames
// then a commit frame whose CRC matches them.
func (w *segWalker) committedBatchAt(off int64) bool {
	crc := crc32.New(castagnoli)
	var fh [walFrameHeaderLen]byte
	buf := make([]byte, 64<<10)
	frames := 0
	for off+walFrameHeaderLen <= w.size {
		if _, err := w.f.ReadAt(fh[:], off); err != nil {
			return false
		}
		typ, n := fh[0], binary.LittleEndian.Uint32(fh[4:8])
		if fh[1] != 0 || fh[2] != 0 || fh[3] != 0 {
			return false
		}
		switch typ {
		case walFrameCommit:
			return frames > 0 && crc.Sum32() == n
		case walFrameEntry, walFrameIndex:
		default:
			return false
		}
		if n > walMaxEntrySize || off+walFrameHeaderLen+int64(n) > w.size {
			return false
		}
		_, _ = crc.Write(fh[:])
		frame := int64(n) + int64(walPad(int(n)))
		for done := int64(0); done < frame; {
			chunk := min(int64(len(buf)), frame-done)
			if _, err := w.f.ReadAt(buf[:chunk], off+walFrameHeaderLen+done); err != nil && !errors.Is(err, io.EOF) {
				return false
			}
			_, _ = crc.Write(buf[:chunk])
			done += chunk
		}
		frames++
		off += walFrameHeaderLen + frame
	}
	return false
}

// firstNonZero returns the offset of the first non-zero byte at or after
// from.
func (w *segWalker) firstNonZero(from int64) (int64, bool) {
	buf := make([]byte, 1<<20)
	for off := from; off < w.size; {
		n, err := w.f.ReadAt(buf[:min(int64(len(buf)), w.size-off)], off)
		for i, b := range buf[:n] {
			if b != 0 {
				return off + int64(i), true
			}
		}
		if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
			return 0, false
		}
		off += int64(n)
	}
	return 0, false
}

func walPad(n int) int { return (walFrameHeaderLen - n%walFrameHeaderLen) & (walFrameHeaderLen - 1) }

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// windowReader serves small reads from a window of the file read at
// once: the walk reads a header of 8 bytes per frame.
type windowReader struct {
	f   io.ReaderAt
	buf []byte
	off int64 // the window's offset in the file
	n   int   // the window's length
}

func newWindowReader(f io.ReaderAt) *windowReader {
	return &windowReader{f: f, buf: make([]byte, 1<<20), off: -1}
}

func (r *windowReader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > len(r.buf)/2 {
		return r.f.ReadAt(p, off)
	}
	if r.off < 0 || off < r.off || off+int64(len(p)) > r.off+int64(r.n) {
		n, err := r.f.ReadAt(r.buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		r.off, r.n = off, n
	}
	n := copy(p, r.buf[off-r.off:r.n])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// SegmentEnd is where the committed frames of the wal segment file at
// path end: what VerifyWAL reads as the segment's data (the corruption
// tests aim their damage inside it).
func SegmentEnd(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end, _, _, c := (&segWalker{f: newWindowReader(f), size: fi.Size()}).walk(path)
	if c != nil {
		return end, c
	}
	return end, nil
}
