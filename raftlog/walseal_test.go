package raftlog

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// TestWALKilledBetweenSealAndRotation probes a crash window of raft-wal:
// the append that fills a segment writes its index and is fsynced, and
// the rotation (metadata: the segment sealed, a new one) follows on
// another goroutine. Killed in between, the data dir holds a sealed
// segment file that the metadata still calls the tail. The log must
// still take appends after a restart.
func TestWALKilledBetweenSealAndRotation(t *testing.T) {
	dir := t.TempDir()
	meta := &metadb.BoltMetaDB{}
	if _, err := meta.Load(dir); err != nil {
		t.Fatal(err)
	}
	seg := types.SegmentInfo{ID: 0, BaseIndex: 1, MinIndex: 1, SizeLimit: 8 << 10, Codec: wal.CodecBinaryV1, CreateTime: time.Now()}
	if err := meta.CommitState(types.PersistentState{NextSegmentID: 1, Segments: []types.SegmentInfo{seg}}); err != nil {
		t.Fatal(err)
	}
	if err := meta.Close(); err != nil {
		t.Fatal(err)
	}
	sw, err := segment.NewFiler(dir, walfs.New()).Create(seg)
	if err != nil {
		t.Fatal(err)
	}
	var codec wal.BinaryCodec
	last := uint64(0)
	for sealed := false; !sealed; {
		last++
		if last > 100 {
			t.Fatal("the segment never sealed")
		}
		var buf bytes.Buffer
		if err := codec.Encode(&raft.Log{Index: last, Term: 1, Type: raft.LogCommand, Data: make([]byte, 1024)}, &buf); err != nil {
			t.Fatal(err)
		}
		if err := sw.Append([]types.LogEntry{{Index: last, Data: buf.Bytes()}}); err != nil {
			t.Fatal(err)
		}
		if sealed, _, err = sw.Sealed(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}

	w, err := openWAL(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.LastIndex(); err != nil || got != last {
		t.Fatalf("last index %d (%v), want %d", got, err, last)
	}
	if err := w.StoreLogs(testLogs(last+1, last+1)); err != nil {
		t.Fatalf("append after the restart: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Both segments read back after one more restart: the sealed one
	// through the index recorded for it, the new one as the tail.
	w, err = openWAL(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := uint64(1); i <= last+1; i++ {
		var e raft.Log
		if err := w.GetLog(i, &e); err != nil || e.Index != i {
			t.Fatalf("entry %d: index %d (%v)", i, e.Index, err)
		}
	}
	if got, _ := w.LastIndex(); got != last+1 {
		t.Fatalf("last index %d, want %d", got, last+1)
	}
}
