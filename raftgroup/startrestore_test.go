package raftgroup

import (
	"bytes"
	"encoding/json"
	"hash/crc64"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// TestOpenChecked: the checking reader gives the state file's bytes and
// then io.EOF when the CRC matches, the bytes and then an error when it
// does not, and stops its read-ahead when closed early.
func TestOpenChecked(t *testing.T) {
	base := runtime.NumGoroutine()
	data := make([]byte, 3*checkedChunk+12345) // several chunks and a partial one
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	t.Run("match", func(t *testing.T) {
		rc, err := openChecked(writeSnapshotFiles(t, data, crcOf(data)), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes (equal %v), %v; want %d and no error", len(got), bytes.Equal(got, data), err, len(data))
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		bad := bytes.Clone(data)
		bad[len(bad)/2] ^= 1
		rc, err := openChecked(writeSnapshotFiles(t, bad, crcOf(data)), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		if err == nil || !strings.Contains(err.Error(), "CRC mismatch") || len(got) != len(data) {
			t.Fatalf("read %d bytes, %v; want all %d, then a CRC mismatch", len(got), err, len(data))
		}
		rc.Close()
	})
	t.Run("closed early", func(t *testing.T) {
		rc, err := openChecked(writeSnapshotFiles(t, data, crcOf(data)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Read(make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cancel := make(chan struct{})
		close(cancel)
		rc, err := openChecked(writeSnapshotFiles(t, data, crcOf(data)), cancel)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(rc); err == nil {
			t.Fatal("a cancelled read reached the end without an error")
		}
		rc.Close()
	})
	t.Run("no CRC", func(t *testing.T) {
		if _, err := openChecked(writeSnapshotFiles(t, data, nil), nil); err == nil {
			t.Fatal("opened a snapshot whose metadata has no CRC")
		}
	})
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// writeSnapshotFiles lays out a snapshot directory as Raft's file store
// does: meta.json with the CRC, and state.bin.
func writeSnapshotFiles(t *testing.T, data, crc []byte) string {
	t.Helper()
	dir := t.TempDir()
	meta, err := json.Marshal(map[string]any{"ID": "1-2-3", "CRC": crc})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotMetaFile), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotStateFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func crcOf(b []byte) []byte {
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(b)
	return h.Sum(nil)
}
