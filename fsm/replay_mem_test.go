package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestMemoryCutsReplayAsBefore: logs of version-20, -16 and -9 entries
// written by the build before issue 24's memory cuts in fsm/state and internal/btree
// (1c07fba; testdata/README.md) replays here to the digests and snapshot
// bytes that build computed at every mark, restores from a snapshot
// where that build restored and carries on alike. The log mixes what
// the cuts touch: headers shared in part with the previous message of a
// key (a content type, a tenant) and not (a trace id), none and empty
// maps; throttle keys giving a fairness key one to three groups (the
// sole group shares the key's ids tree); concurrency keys; leases,
// delays and dead-letters with stories (the record's more); dedup ids
// (the expiry index without the hash); creates, updates, deletes,
// redrives, pauses and the property test's generator. Each snapshot is
// taken at its mark and written only after the next entries applied,
// so the bytes also check that nothing applied after a freeze shows in
// it.
func TestMemoryCutsReplayAsBefore(t *testing.T) {
	for _, v := range []struct {
		version        uint32
		entries, marks int
	}{{20, 2000, 50}, {16, 1000, 20}, {9, 1000, 20}} {
		t.Run(fmt.Sprint("v", v.version), func(t *testing.T) { replayMem(t, v.version, v.entries, v.marks) })
	}
}

// replayMem replays the fixture of one log version, which must have at
// least minEntries entries and minMarks marks.
func replayMem(t *testing.T, version uint32, minEntries, minMarks int) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var logs []*raft.Log
	for raw := read(fmt.Sprintf("mem-v%d-log.bin", version)); len(raw) > 0; {
		if len(raw) < 20 {
			t.Fatal("truncated log fixture")
		}
		index, term, n := binary.BigEndian.Uint64(raw[:8]), binary.BigEndian.Uint64(raw[8:16]), binary.BigEndian.Uint32(raw[16:20])
		logs = append(logs, &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: raw[20 : 20+n]})
		raw = raw[20+n:]
	}
	type mark struct {
		kind           string
		digest, sha256 string
	}
	marks := map[uint64]mark{}
	restores := 0
	for _, line := range strings.Split(strings.TrimSpace(string(read(fmt.Sprintf("mem-v%d-marks.txt", version)))), "\n") {
		var m mark
		var index uint64
		if _, err := fmt.Sscan(line, &m.kind, &index, &m.digest, &m.sha256); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		marks[index] = m
		if m.kind == "restore" {
			restores++
		}
	}
	for _, l := range logs {
		if cmd, err := Decode(l.Data); err != nil || cmd.GetVersion() != version {
			t.Fatalf("entry %d: version %d (%v), want %d", l.Index, cmd.GetVersion(), err, version)
		}
	}
	if len(logs) < minEntries || len(marks) < minMarks || restores < 3 {
		t.Fatalf("fixture of %d entries, %d marks, %d restores: not the one generated", len(logs), len(marks), restores)
	}

	// A frozen snapshot waiting to be written, with what it must be.
	type pending struct {
		snap  raft.FSMSnapshot
		index uint64
		want  string
		left  int // entries to apply before it is written
	}
	var waiting []pending
	persist := func(p pending) {
		t.Helper()
		sink := &memSink{}
		if err := p.snap.Persist(sink); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(sink.Bytes())); got != p.want {
			t.Fatalf("snapshot at %d, written later: sha256 %s, the build before the memory cuts wrote %s", p.index, got, p.want)
		}
	}
	f := New(Options{})
	checked := 0
	for _, l := range logs {
		f.Apply(l)
		if err := f.Integrity().Verify(); err != nil {
			t.Fatalf("Verify after entry %d: %v", l.Index, err)
		}
		kept := waiting[:0]
		for _, p := range waiting {
			if p.left--; p.left <= 0 {
				persist(p)
			} else {
				kept = append(kept, p)
			}
		}
		waiting = kept
		m, ok := marks[l.Index]
		if !ok {
			continue
		}
		checked++
		if got := digestOf(t, f); got != m.digest {
			t.Fatalf("digest after entry %d: %s, the build before the memory cuts computed %s", l.Index, got, m.digest)
		}
		if m.kind == "restore" {
			snap := snapshotBytes(t, f)
			if got := fmt.Sprintf("%x", sha256.Sum256(snap)); got != m.sha256 {
				t.Fatalf("snapshot at %d: sha256 %s, the build before the memory cuts wrote %s", l.Index, got, m.sha256)
			}
			next := New(Options{})
			if err := next.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatalf("restore at %d: %v", l.Index, err)
			}
			if got := digestOf(t, next); got != m.digest {
				t.Fatalf("restored at %d: digest %s, want %s", l.Index, got, m.digest)
			}
			f = next
			continue
		}
		s, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, pending{snap: s, index: l.Index, want: m.sha256, left: 1 + int(l.Index%13)})
	}
	for _, p := range waiting {
		persist(p)
	}
	if checked != len(marks) {
		t.Fatalf("%d of %d marks reached", checked, len(marks))
	}
}
