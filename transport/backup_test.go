package transport_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// TestBackupMetaGroup: Backup of group "meta" asked of a node that does
// not lead meta is relayed from meta's leader, with the caller's
// credentials: the info names group meta, meta's leader and the meta
// state's applied index; the data is meta's state there, holding a token
// created after the handover, and its SHA-256 is the digest every meta
// replica computes at that index. Before the handover there is nothing
// to back up (FAILED_PRECONDITION).
func TestBackupMetaGroup(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	c.WaitClusterVersion(fsm.HandoverVersion)
	ctx := tctx(t, 30*time.Second)
	tok := mustToken(t, ctx, c.Nodes[0], "after-handover", 0)

	var leader, other *testcluster.Node
	harness.Eventually(t, 10*time.Second, func() error {
		leader, other = nil, nil
		for _, n := range c.Nodes {
			if n.Host.Meta().Raft().LeaderReady() {
				leader = n
			} else {
				other = n
			}
		}
		if leader == nil || other == nil {
			return errors.New("no established meta leader yet")
		}
		// The token is checked by other's own replica.
		if got, want := other.Host.Meta().FSM().AppliedIndex(), leader.Host.Meta().FSM().AppliedIndex(); got < want {
			return fmt.Errorf("%s's meta replica at %d, the leader's at %d", other.ID, got, want)
		}
		return nil
	})
	s, err := other.Admin.Backup(bearer(ctx, tok), &raftqv1.BackupRequest{Group: "meta"})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a meta backup with a token that is no admin's: %v, want PERMISSION_DENIED", err)
	}
	s, err = other.Admin.Backup(bearer(ctx, testBootstrap), &raftqv1.BackupRequest{Group: "meta"})
	if err != nil {
		t.Fatal(err)
	}
	var info *raftqv1.BackupInfo
	var data []byte
	var last *raftqv1.BackupChunk
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case info == nil:
			if info = m.GetInfo(); info == nil || len(m.Data) > 0 {
				t.Fatalf("first message %v", m)
			}
		case last != nil:
			t.Fatalf("a message after the checksum: %v", m)
		case m.Sha256 != "":
			last = m
		default:
			data = append(data, m.Data...)
		}
	}
	if info.Group != "meta" || info.NodeId != leader.ID || info.Index == 0 || info.Term == 0 || info.ClusterVersion != fsm.MaxLogVersion {
		t.Fatalf("meta backup info %v (meta leader %s)", info, leader.ID)
	}
	sum := sha256.Sum256(data)
	if last == nil || last.Sha256 != hex.EncodeToString(sum[:]) || last.Size != int64(len(data)) {
		t.Fatalf("%d bytes hash to %x; the stream ended with %v", len(data), sum, last)
	}
	for _, n := range c.Nodes {
		f := n.Host.Meta().FSM()
		harness.Eventually(t, 10*time.Second, func() error {
			if got := f.AppliedIndex(); got < info.Index {
				return fmt.Errorf("%s's meta replica at %d, the backup at %d", n.ID, got, info.Index)
			}
			return nil
		})
		if d := f.Digest(); f.AppliedIndex() != info.Index || hex.EncodeToString(d[:]) != last.Sha256 {
			t.Fatalf("%s's meta replica at %d has digest %x; the backup at %d has %s", n.ID, f.AppliedIndex(), d, info.Index, last.Sha256)
		}
	}
	restored := meta.New(meta.Options{})
	if err := restored.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if !restored.Seeded() || len(restored.Auth().Record().GetTokens()) != 1 {
		t.Fatalf("the meta backup holds %d tokens (seeded %v), want the one created after the handover", len(restored.Auth().Record().GetTokens()), restored.Seeded())
	}

	// Before the handover meta holds nothing.
	old := startInproc(t, inprocOpts{nodes: 1, logVersion: fsm.HandoverVersion - 1})
	s, err = old.Nodes[0].Admin.Backup(ctx, &raftqv1.BackupRequest{Group: "meta"})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a meta backup before the handover: %v, want FAILED_PRECONDITION", err)
	}
}
