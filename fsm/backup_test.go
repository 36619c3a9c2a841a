package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestCheckpointStateIsABackup: the state a Checkpoint hands its proposer
// streams to bytes whose SHA-256 is the digest every replica reports at
// that index, whatever is applied after it; restored, it is the same
// state, and the restored replica reports that digest at the same index.
func TestCheckpointStateIsABackup(t *testing.T) {
	h := newHarness(t)
	h.raise(MaxLogVersion)
	h.term = 7
	h.create("q", &fsmv1.QueueConfig{MaxDeliveries: 2})
	ids := h.enqueuePayloads("q", "a", "b", "c", "d")
	ds := h.grant("q", "c1", 60_000, ids[0], ids[1])
	h.nack(ds[0], 0, true) // to the DLQ
	res := as[*CheckpointResult](t, h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}}))
	if res.Index != h.index || res.Term != 7 || res.Frozen == nil || res.Frozen.Index() != h.index || res.Frozen.ClusterVersion() != MaxLogVersion {
		t.Fatalf("checkpoint result %+v", res)
	}
	h.enqueuePayloads("q", "after") // must not reach the backup

	var buf bytes.Buffer
	if err := res.Frozen.Canonical(&buf); err != nil { // what Backup writes
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	want, err := h.f.Integrity().DigestAt(res.Index)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(sum[:]) != want {
		t.Fatalf("backup bytes hash to %x, the digest at %d is %s", sum, res.Index, want)
	}

	g := New(Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if g.Reader().AppliedIndex() != res.Index || g.Reader().ClusterVersion() != MaxLogVersion {
		t.Fatalf("restored at index %d, cluster version %d", g.Reader().AppliedIndex(), g.Reader().ClusterVersion())
	}
	got, err := g.Integrity().DigestAt(res.Index)
	if err != nil || got != want {
		t.Fatalf("restored replica's digest at %d: %s, %v; want %s", res.Index, got, err, want)
	}
	if err := g.Integrity().Verify(); err != nil {
		t.Fatal(err)
	}
	if info, err := g.Reader().GetQueue("q"); err != nil || info.Stats.Ready != 2 || info.Stats.InFlight != 1 {
		t.Fatalf("restored queue: %+v, %v", info, err)
	}
	// A backup names no meta founders (they were its cluster's); an
	// offline restore founds meta with the restoring node, and the state's
	// digest stays the backup's.
	if fs := g.Reader().MetaFounders(); len(fs) != 0 {
		t.Fatalf("a backup restored as it is names founders %v", fs)
	}
	refounded, err := RefoundMeta(bytes.NewReader(buf.Bytes()), []MetaServer{{ID: "r1", Address: "10.9.9.9:7402"}})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{})
	if err := r.Restore(io.NopCloser(refounded)); err != nil {
		t.Fatal(err)
	}
	if fs := r.Reader().MetaFounders(); len(fs) != 1 || fs[0].ID != "r1" || fs[0].Address != "10.9.9.9:7402" {
		t.Fatalf("refounded: founders %v", fs)
	}
	if got, err := r.Integrity().DigestAt(res.Index); err != nil || got != want {
		t.Fatalf("refounded replica's digest at %d: %s, %v; want %s", res.Index, got, err, want)
	}
	// The source's own founders are in its Raft snapshots, not the backup.
	if fs := restoredCopy(t, h).f.Reader().MetaFounders(); len(fs) != 1 || fs[0].ID != testFounders[0].GetId() {
		t.Fatalf("a Raft snapshot's founders %v", fs)
	}
}
