package raftlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/internal/damage"
)

func TestEntryChecksum(t *testing.T) {
	l := &raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("hello"), AppendedAt: time.Now()}
	s := sealLog(l)
	if l.Extensions != nil {
		t.Fatal("sealLog changed the entry it was given (raft's LogCache holds it)")
	}
	got := *s
	if sealed, err := openLog(&got); !sealed || err != nil || got.Extensions != nil || string(got.Data) != "hello" {
		t.Fatalf("openLog of a sealed entry: sealed %v, err %v, %+v", sealed, err, got)
	}
	for _, mutate := range []func(*raft.Log){
		func(l *raft.Log) { l.Data = []byte("hellp") },
		func(l *raft.Log) { l.Index = 8 },
		func(l *raft.Log) { l.Term = 2 },
		func(l *raft.Log) { l.Type = raft.LogNoop },
		func(l *raft.Log) { l.Extensions = append(bytes.Clone(l.Extensions), 'x') },
	} {
		bad := *s
		bad.Data = bytes.Clone(s.Data)
		mutate(&bad)
		if _, err := openLog(&bad); err == nil {
			t.Fatalf("a changed entry passed its checksum: %+v", bad)
		}
	}
	old := &raft.Log{Index: 1, Data: []byte("written before checksums")}
	if sealed, err := openLog(old); sealed || err != nil {
		t.Fatalf("an entry without the envelope: sealed %v, err %v; want it passed as it is", sealed, err)
	}
}

// walFixture writes batches of entries to a wal with small segments (so
// some are sealed) through the checks, and closes it.
func walFixture(t *testing.T, batches int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	w, err := openWALSized(dir, hclog.NewNullLogger(), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	s := &Checked{LogStore: w, File: dir, OnCorrupt: func(c *Corruption) { t.Errorf("corrupt while writing: %v", c) }}
	idx := uint64(1)
	for b := 0; b < batches; b++ {
		var logs []*raft.Log
		for range 8 {
			logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(idx)}, 200)})
			idx++
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// segments returns the wal's segment files, oldest first.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(files) < 2 {
		t.Fatalf("segments: %v, %v; want a sealed one and the tail", files, err)
	}
	sort.Strings(files)
	return files
}

// dataEnd is where the committed frames of a segment file end.
func dataEnd(t *testing.T, path string) int64 {
	t.Helper()
	end, err := SegmentEnd(path)
	if err != nil || end <= walFileHeaderLen {
		t.Fatalf("walk %s: end %d, %v", path, end, err)
	}
	return end
}

// TestVerifyWALFindsDamage: raft-wal itself opens each of these damaged
// logs without complaint (a flipped bit before the tail's last batch, a
// range zeroed or a cut in the tail silently end the log early, losing
// acknowledged entries); the start-up check finds each, naming the file
// and the offset.
func TestVerifyWALFindsDamage(t *testing.T) {
	cases := []struct {
		name string
		// damage changes the wal in dir; the file it hits is returned.
		damage func(t *testing.T, segs []string) string
	}{
		{"bit flipped in a sealed segment", func(t *testing.T, segs []string) string {
			damage.FlipBit(t, segs[0], dataEnd(t, segs[0])/2)
			return segs[0]
		}},
		{"bit flipped in an early batch of the tail", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			damage.FlipBit(t, tail, walFileHeaderLen+(dataEnd(t, tail)-walFileHeaderLen)/4)
			return tail
		}},
		{"range zeroed in the middle of the tail", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			damage.ZeroRange(t, tail, dataEnd(t, tail)/3, 300)
			return tail
		}},
		{"tail cut short", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			if err := os.Truncate(tail, dataEnd(t, tail)/2); err != nil {
				t.Fatal(err)
			}
			return tail
		}},
		{"sealed segment cut short", func(t *testing.T, segs []string) string {
			if err := os.Truncate(segs[0], dataEnd(t, segs[0])/2); err != nil {
				t.Fatal(err)
			}
			return segs[0]
		}},
		{"bit flipped in the tail's last commit", func(t *testing.T, segs []string) string {
			tail := segs[len(segs)-1]
			damage.FlipBit(t, tail, dataEnd(t, tail)-2)
			return tail
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := walFixture(t, 60)
			if c := VerifyWAL(dir); c != nil {
				t.Fatalf("a sound wal: %v", c)
			}
			file := tc.damage(t, segments(t, dir))
			c := VerifyWAL(dir)
			if c == nil {
				t.Fatal("damage not found")
			}
			if c.File != file || c.Offset < 0 {
				t.Fatalf("found %v; want file %s and an offset", c, file)
			}
			t.Logf("found: %v", c)
		})
	}
}

// TestVerifyWALAcceptsTornTail: what a kill -9 during an append leaves (the
// batch's frames, no commit) is what raft-wal rolls back at open, not
// damage.
func TestVerifyWALAcceptsTornTail(t *testing.T) {
	dir := walFixture(t, 60)
	segs := segments(t, dir)
	tail := segs[len(segs)-1]
	end := dataEnd(t, tail)
	f, err := os.OpenFile(tail, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// An entry frame of 16 bytes, no commit after it.
	frame := append([]byte{walFrameEntry, 0, 0, 0, 16, 0, 0, 0}, bytes.Repeat([]byte{7}, 16)...)
	if _, err := f.WriteAt(frame, end); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if c := VerifyWAL(dir); c != nil {
		t.Fatalf("a torn last append taken for damage: %v", c)
	}
	w, err := openWALSized(dir, hclog.NewNullLogger(), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if last, err := w.LastIndex(); err != nil || last != 60*8 {
		t.Fatalf("last index after the torn append: %d, %v; want %d", last, err, 60*8)
	}
}

// TestCheckedReadsFindDamageWhileRunning: a bit flipped, a range zeroed
// or the file cut under an open wal is found by the next read of an entry
// there, reported once, with the file and index; raft-wal alone returns
// the changed bytes as the entry.
func TestCheckedReadsFindDamageWhileRunning(t *testing.T) {
	for _, tc := range []string{"flip", "zero", "truncate"} {
		t.Run(tc, func(t *testing.T) {
			dir := walFixture(t, 60)
			w, err := openWALSized(dir, hclog.NewNullLogger(), 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var reports []*Corruption
			s := &Checked{LogStore: w, File: dir, OnCorrupt: func(c *Corruption) { reports = append(reports, c) }}
			segs := segments(t, dir)
			tail := segs[len(segs)-1]
			end := dataEnd(t, tail)
			switch tc {
			case "flip":
				// Every byte of an entry's payload: flip one in each
				// of the first entries of the tail.
				for off := int64(walFileHeaderLen + 64); off < end; off += 4096 {
					damage.FlipBit(t, tail, off)
				}
			case "zero":
				damage.ZeroRange(t, tail, walFileHeaderLen, end-walFileHeaderLen)
			case "truncate":
				if err := os.Truncate(tail, walFileHeaderLen); err != nil {
					t.Fatal(err)
				}
			}
			first, _ := w.FirstIndex()
			last, _ := w.LastIndex()
			bad := 0
			for i := first; i <= last; i++ {
				var l raft.Log
				err := s.GetLog(i, &l)
				if err != nil {
					var c *Corruption
					if !errors.As(err, &c) || c.Index != i || c.File != dir {
						t.Fatalf("read %d: %v; want a Corruption naming the index and the wal", i, err)
					}
					bad++
					continue
				}
				if l.Index != i || len(l.Data) != 200 || l.Data[0] != byte(i) || l.Extensions != nil {
					t.Fatalf("read %d: a damaged entry passed: %+v", i, l)
				}
			}
			if bad == 0 || len(reports) != bad {
				t.Fatalf("%d corrupt reads, %d reports; want some, each reported", bad, len(reports))
			}
		})
	}
}
