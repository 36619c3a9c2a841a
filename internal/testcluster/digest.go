package testcluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/raftq/raftq/fsm"
)

// memSink collects a snapshot in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// StateDigest hashes the FSM's state — queues, configs, counters,
// messages with their leases, dedup entries — leaving out the snapshot
// header (applied index and clock), which every applied command moves
// even when it changes nothing.
func StateDigest(t testing.TB, f *fsm.FSM) string {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	b := sink.Bytes()
	hlen, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < hlen {
		t.Fatalf("snapshot header unreadable (%d bytes)", len(b))
	}
	sum := sha256.Sum256(b[n+int(hlen):])
	return hex.EncodeToString(sum[:])
}
