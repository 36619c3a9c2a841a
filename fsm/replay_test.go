package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// v1Fixture is what the build before log versioning wrote and computed
// (testdata/README.md says how it was produced).
type v1Fixture struct {
	logs        []*raft.Log
	snapshot    []byte
	snapIndex   uint64
	snapDigest  string
	restored    string
	lastIndex   uint64
	lastDigest  string
	checkpoints map[uint64]string
}

func loadV1Fixture(t *testing.T) *v1Fixture {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fx := &v1Fixture{snapshot: read("v1-snapshot.bin"), checkpoints: map[uint64]string{}}
	raw := read("v1-log.bin")
	for len(raw) > 0 {
		if len(raw) < 12 {
			t.Fatalf("truncated log fixture")
		}
		index, n := binary.BigEndian.Uint64(raw[:8]), binary.BigEndian.Uint32(raw[8:12])
		fx.logs = append(fx.logs, &raft.Log{Index: index, Type: raft.LogCommand, Data: raw[12 : 12+n]})
		raw = raw[12+n:]
	}
	sc := bufio.NewScanner(bytes.NewReader(read("v1-digests.txt")))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var err error
		switch f[0] {
		case "snapshot_index":
			_, err = fmt.Sscan(f[1], &fx.snapIndex)
		case "snapshot_digest":
			fx.snapDigest = f[1]
		case "restored_digest":
			fx.restored = f[1]
		case "last_index":
			_, err = fmt.Sscan(f[1], &fx.lastIndex)
		case "last_digest":
			fx.lastDigest = f[1]
		case "checkpoint":
			var idx uint64
			_, err = fmt.Sscan(f[1], &idx)
			fx.checkpoints[idx] = f[2]
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(fx.logs) == 0 || fx.snapDigest == "" || fx.lastDigest == "" || len(fx.checkpoints) == 0 {
		t.Fatal("incomplete fixture")
	}
	return fx
}

// TestReplayV1Fixture: a log and a snapshot written by the build before log
// versioning replay and restore to the digests that build computed, byte
// for byte, so replicas of both builds agree during a rolling upgrade and
// existing data dirs keep working.
func TestReplayV1Fixture(t *testing.T) {
	fx := loadV1Fixture(t)

	// The fixture exercises every command type of log version 1.
	seen := map[string]bool{}
	for _, l := range fx.logs {
		cmd, err := Decode(l.Data)
		if err != nil {
			t.Fatalf("entry %d: %v", l.Index, err)
		}
		if cmd.GetVersion() != 0 {
			t.Fatalf("entry %d has version %d; the old build wrote none", l.Index, cmd.GetVersion())
		}
		if cmd.Op != nil {
			seen[fmt.Sprintf("%T", cmd.Op)] = true
		}
	}
	v1Ops := []fsmv1.Command{
		{Op: &fsmv1.Command_CreateQueue{}}, {Op: &fsmv1.Command_UpdateQueue{}}, {Op: &fsmv1.Command_DeleteQueue{}},
		{Op: &fsmv1.Command_PurgeQueue{}}, {Op: &fsmv1.Command_Enqueue{}}, {Op: &fsmv1.Command_LeaseGrant{}},
		{Op: &fsmv1.Command_LeaseRollback{}}, {Op: &fsmv1.Command_Ack{}}, {Op: &fsmv1.Command_Nack{}},
		{Op: &fsmv1.Command_Extend{}}, {Op: &fsmv1.Command_LeaseExpire{}}, {Op: &fsmv1.Command_ReleaseConsumer{}},
		{Op: &fsmv1.Command_Redrive{}}, {Op: &fsmv1.Command_Tick{}}, {Op: &fsmv1.Command_Checkpoint{}},
	}
	for i := range v1Ops {
		if name := fmt.Sprintf("%T", v1Ops[i].Op); !seen[name] {
			t.Errorf("fixture has no %s entry", name)
		}
	}

	t.Run("replay log", func(t *testing.T) {
		f := New(Options{})
		for _, l := range fx.logs {
			f.Apply(l)
			if err := f.Integrity().Verify(); err != nil {
				t.Fatalf("Verify after entry %d: %v", l.Index, err)
			}
			if l.Index == fx.snapIndex {
				if got := digestOf(t, f); got != fx.snapDigest {
					t.Fatalf("digest at %d: %s, the old build computed %s", l.Index, got, fx.snapDigest)
				}
				if got := snapshotBytes(t, f); !bytes.Equal(got, fx.snapshot) {
					t.Fatalf("snapshot at %d differs from the old build's (%d vs %d bytes)", l.Index, len(got), len(fx.snapshot))
				}
			}
		}
		if idx, got, err := f.Integrity().Digest(); err != nil || idx != fx.lastIndex || got != fx.lastDigest {
			t.Fatalf("final digest at %d: %s (%v), the old build computed %s at %d", idx, got, err, fx.lastDigest, fx.lastIndex)
		}
		for idx, want := range fx.checkpoints {
			if got, err := f.Integrity().DigestAt(idx); err != nil || got != want {
				t.Fatalf("checkpoint %d: %s (%v), the old build computed %s", idx, got, err, want)
			}
		}
		if f.Reader().ClusterVersion() != 1 {
			t.Fatalf("cluster version %d after a version-1 log", f.Reader().ClusterVersion())
		}
	})

	t.Run("restore snapshot then replay the rest", func(t *testing.T) {
		f := New(Options{})
		if err := f.Restore(io.NopCloser(bytes.NewReader(fx.snapshot))); err != nil {
			t.Fatal(err)
		}
		if err := f.Integrity().Verify(); err != nil {
			t.Fatal(err)
		}
		if idx, got, err := f.Integrity().Digest(); err != nil || idx != fx.snapIndex || got != fx.restored {
			t.Fatalf("restored digest at %d: %s (%v), the old build computed %s at %d", idx, got, err, fx.restored, fx.snapIndex)
		}
		for _, l := range fx.logs {
			if l.Index <= fx.snapIndex {
				continue
			}
			f.Apply(l)
			if err := f.Integrity().Verify(); err != nil {
				t.Fatalf("Verify after entry %d: %v", l.Index, err)
			}
		}
		if _, got, _ := f.Integrity().Digest(); got != fx.lastDigest {
			t.Fatalf("digest after restore and replay: %s, the old build computed %s", got, fx.lastDigest)
		}
	})
}

// TestReplayV10Fixture: a log of version-10 entries written by the last
// build of version 10 (testdata/README.md) replays to the digests that
// build computed, and its snapshot is byte for byte what this build
// writes at the same index: the rules of version 11 (keyed deletes, the
// bounded sweep) change nothing for older entries. The log has a sweep of
// 3,000 delays, 3,000 TTLs and 6,000 dedup expiries due at one instant
// (swept whole by the entry that finds them due) and a DeleteQueue
// carrying an idempotency key, which a version-10 entry ignores.
func TestReplayV10Fixture(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var logs []*raft.Log
	for raw := read("v10-log.bin"); len(raw) > 0; {
		if len(raw) < 20 {
			t.Fatal("truncated log fixture")
		}
		index, term, n := binary.BigEndian.Uint64(raw[:8]), binary.BigEndian.Uint64(raw[8:16]), binary.BigEndian.Uint32(raw[16:20])
		logs = append(logs, &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: raw[20 : 20+n]})
		raw = raw[20+n:]
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(read("v10-digests.txt"))), "\n") {
		f := strings.Fields(line)
		want[f[0]] = f[1]
	}
	snapshot := read("v10-snapshot.bin")
	at := func(key string) uint64 {
		var i uint64
		if _, err := fmt.Sscan(want[key], &i); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return i
	}
	sweepIndex, snapIndex, lastIndex := at("sweep_index"), at("snapshot_index"), at("last_index")

	f := New(Options{})
	for _, l := range logs {
		if cmd, err := Decode(l.Data); err != nil || cmd.GetVersion() != 10 {
			t.Fatalf("entry %d: version %d (%v), want 10", l.Index, cmd.GetVersion(), err)
		}
		f.Apply(l)
		if err := f.Integrity().Verify(); err != nil {
			t.Fatalf("Verify after entry %d: %v", l.Index, err)
		}
		switch l.Index {
		case sweepIndex:
			if got := digestOf(t, f); got != want["sweep_digest"] {
				t.Fatalf("digest after the big sweep (%d): %s, the version-10 build computed %s", l.Index, got, want["sweep_digest"])
			}
		case snapIndex:
			if got := digestOf(t, f); got != want["snapshot_digest"] {
				t.Fatalf("digest at %d: %s, the version-10 build computed %s", l.Index, got, want["snapshot_digest"])
			}
			if got := snapshotBytes(t, f); !bytes.Equal(got, snapshot) {
				t.Fatalf("snapshot at %d differs from the version-10 build's (%d vs %d bytes)", l.Index, len(got), len(snapshot))
			}
		}
	}
	if idx, got, err := f.Integrity().Digest(); err != nil || idx != lastIndex || got != want["last_digest"] {
		t.Fatalf("final digest at %d: %s (%v), the version-10 build computed %s at %d", idx, got, err, want["last_digest"], lastIndex)
	}

	restored := New(Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshot))); err != nil {
		t.Fatal(err)
	}
	for _, l := range logs[snapIndex:] {
		restored.Apply(l)
	}
	if _, got, _ := restored.Integrity().Digest(); got != want["last_digest"] {
		t.Fatalf("restored at %d and replayed: %s, the version-10 build computed %s", snapIndex, got, want["last_digest"])
	}
}
