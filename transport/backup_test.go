package transport_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
)

// TestBackupStream: a follower redirects Backup to the leader; the leader
// sends the info alone, then data in chunks of at most BackupChunkBytes,
// then the SHA-256 and size of the data alone. That SHA-256 is the digest
// every replica reports at the backup's index, and the data restores to
// the same state.
func TestBackupStream(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.Leader()
	mustCreate(t, l, "q", nil)
	// Two entries of 600 KiB (one each: smaller entries keep a loaded
	// machine's heartbeats on time) make the state span two chunks.
	big := bytes.Repeat([]byte("x"), 600<<10)
	mustEnqueue(t, l, "q", big)
	mustEnqueue(t, l, "q", big, []byte("small"))

	// A stream's status arrives with its first Recv.
	fs, err := c.Followers()[0].Admin.Backup(tctx(t, 10*time.Second), &raftqv1.BackupRequest{})
	if err == nil {
		_, err = fs.Recv()
	}
	checkRedirect(t, err, "NOT_LEADER", l)

	s, err := l.Admin.Backup(tctx(t, 30*time.Second), &raftqv1.BackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	info := first.GetInfo()
	if info == nil || len(first.Data) > 0 || first.Sha256 != "" || info.Index == 0 || info.NodeId != l.ID || info.ClusterVersion != fsm.MaxLogVersion || info.Term == 0 || info.Group != "data" {
		t.Fatalf("first message %v", first)
	}
	var data []byte
	chunks := 0
	var last *raftqv1.BackupChunk
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if last != nil {
			t.Fatalf("a message after the checksum: %v", m)
		}
		switch {
		case m.Sha256 != "":
			if len(m.Data) > 0 || m.Info != nil {
				t.Fatalf("the checksum message carries more: %v", m.Info)
			}
			last = m
		case len(m.Data) > transport.BackupChunkBytes || len(m.Data) == 0 || m.Info != nil:
			t.Fatalf("data message of %d bytes, info %v", len(m.Data), m.Info)
		default:
			data = append(data, m.Data...)
			chunks++
		}
	}
	sum := sha256.Sum256(data)
	if last == nil || last.Sha256 != hex.EncodeToString(sum[:]) || last.Size != int64(len(data)) || chunks < 2 {
		t.Fatalf("%d bytes in %d chunks hash to %x; the stream ended with %v", len(data), chunks, sum, last)
	}
	for _, n := range c.Nodes {
		nd, err := n.Admin.LocalDigest(tctx(t, 10*time.Second), &raftqv1.LocalDigestRequest{Index: info.Index})
		if err != nil || nd.Digest != last.Sha256 {
			t.Fatalf("%s at index %d: %v %v; the backup's SHA-256 is %s", n.ID, info.Index, nd, err, last.Sha256)
		}
	}
	f := fsm.New(fsm.Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Integrity().DigestAt(info.Index); err != nil || got != last.Sha256 {
		t.Fatalf("restored digest %s, %v", got, err)
	}
	if q, err := f.Reader().GetQueue("q"); err != nil || q.Stats.Ready != 3 {
		t.Fatalf("restored queue %v, %v", q, err)
	}
}
