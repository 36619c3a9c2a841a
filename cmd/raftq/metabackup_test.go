package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/meta"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protodelim"
)

const testBoot = "boot-secret-0123456789abcdef"

func withBearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// authed configures a kit node with token auth and the bootstrap token.
func authed(_ string, c *host.Config) {
	c.Auth.Mode, c.Auth.BootstrapToken = auth.ModeToken, testBoot
}

// restoredNode starts one kit node on a data dir restored from file by
// the CLI, for the node's own id and Raft address.
func restoredNode(t *testing.T, file string) *testcluster.Cluster {
	t.Helper()
	var once sync.Once
	return testcluster.Start(t, testcluster.Options{Nodes: 1, Adjust: func(id string, c *host.Config) {
		authed(id, c)
		once.Do(func() {
			r := raftq(t, "127.0.0.1:1", "", "backup", "restore", file, "--data-dir", c.Node.Cluster.DataDir, "--node-id", id, "--raft-addr", c.RaftAddr)
			if r.code != 0 {
				t.Fatalf("restore: %s", r.stderr)
			}
		})
	}})
}

// TestBackupRestoresMetaGroup: a token, a grant and a setting made after
// the handover (so only in the meta group) are in a backup saved by the
// CLI, and a node started on the dir it restores serves them at once:
// the token authenticates, the grant holds (and nothing more), the
// setting is in force in meta and in the data log, meta is seeded with
// the node its only voter. A file of the previous releases' format (data
// only) still restores, as before: the data group's frozen copy. A meta
// section truncated, damaged or not loading is refused with a clear
// error, and no data dir is made.
func TestBackupRestoresMetaGroup(t *testing.T) {
	src := testcluster.Start(t, testcluster.Options{Nodes: 3, Adjust: authed})
	src.WaitClusterVersion(fsm.HandoverVersion)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := withBearer(ctx, testBoot)
	n := src.Nodes[1]
	if _, err := n.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	authc := raftqv1.NewAuthClient(n.Conn)
	ct, err := authc.CreateToken(admin, &raftqv1.CreateTokenRequest{Name: "ci", Identity: "builder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authc.Grant(admin, &raftqv1.GrantRequest{Identity: "builder", Pattern: "jobs", Allow: []string{"produce"}}); err != nil {
		t.Fatal(err)
	}
	maxQueues := int64(77)
	if _, err := n.Admin.SetClusterSettings(admin, &raftqv1.SetClusterSettingsRequest{MaxQueues: &maxQueues}); err != nil {
		t.Fatal(err)
	}
	enqueue := func(n *testcluster.Node, token, queue string) error {
		_, err := n.Broker.Enqueue(withBearer(ctx, token), &raftqv1.EnqueueRequest{Queue: queue, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("p")}}})
		return err
	}
	if err := enqueue(n, ct.Token, "jobs"); err != nil {
		t.Fatalf("the new token on the source cluster: %v", err)
	}

	dir := t.TempDir()
	whole, dataOnly := filepath.Join(dir, "whole.backup"), filepath.Join(dir, "data-only.backup")
	addr := src.Nodes[0].Addrs.GRPC
	r := raftq(t, addr, "", "--token", testBoot, "backup", "save", whole)
	if r.code != 0 || !strings.Contains(r.stdout, "with the meta group: index ") {
		t.Fatalf("backup save: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := raftq(t, addr, "", "--token", testBoot, "backup", "save", "--data-only", dataOnly); r.code != 0 || strings.Contains(r.stdout, "meta") {
		t.Fatalf("backup save --data-only: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(dataOnly); err != nil || !bytes.HasPrefix(b, []byte(backupMagic)) {
		t.Fatalf("the data-only file does not have the previous releases' format: %v", err)
	}
	src.Stop()

	// Refusals leave no data dir.
	good, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	metaAt := metaSectionOffset(t, good)
	damaged := slices.Clone(good)
	damaged[metaAt+(len(good)-metaAt)/2] ^= 0x40
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"meta truncated":      {good[:len(good)-10], "truncated"},
		"meta section gone":   {good[:metaAt], "truncated"},
		"meta damaged":        {damaged, "not an intact raftq backup"},
		"meta does not load":  {withMetaState(t, good, []byte("\x08\x01\x10\x07 not a meta state")), "meta group's state does not load"},
		"something after it":  {append(slices.Clone(good), 0), "goes on after its checksum"},
		"a third info record": {append(slices.Clone(good), good[len(backupMagic2):metaAt]...), "goes on after its checksum"},
	} {
		f := filepath.Join(t.TempDir(), "bad.backup")
		if err := os.WriteFile(f, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(t.TempDir(), "data")
		r := raftq(t, "127.0.0.1:1", "", "backup", "restore", f, "--data-dir", d, "--node-id", "n1")
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("restore of a file whose %s: %d, stderr %q; want an error saying %q", name, r.code, r.stderr, tc.want)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("a refused restore (%s) made the data dir: %v", name, err)
		}
	}

	// The whole backup: meta's tokens, grants and settings at once.
	dst := restoredNode(t, whole)
	rn := dst.Nodes[0]
	m := rn.Host.Meta()
	if !m.FSM().Seeded() {
		t.Fatal("the restored meta group is not seeded")
	}
	if err := enqueue(rn, ct.Token, "jobs"); err != nil {
		t.Fatalf("the token created after the handover, on the restored node: %v", err)
	}
	if err := enqueue(rn, ct.Token, "other"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the token on a queue it has no grant for: %v, want PERMISSION_DENIED", err)
	}
	if got := m.FSM().Settings().MaxQueues; got != maxQueues {
		t.Fatalf("restored meta max_queues %d, want %d", got, maxQueues)
	}
	if _, held := rn.State().Reader().Held(); held.MaxQueues != maxQueues {
		t.Fatalf("restored data log max_queues %d, want %d", held.MaxQueues, maxQueues)
	}
	st, err := rn.Admin.Status(admin, &raftqv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ms := st.GetMeta(); !ms.GetSeeded() || ms.GetLeaderId() != rn.ID || !slices.Equal(ms.GetVoters(), []string{rn.ID}) {
		t.Fatalf("restored meta status %v", ms)
	}
	if g, ok := m.FSM().Group("data"); !ok || !slices.Equal(g.Replicas, []string{rn.ID}) {
		t.Fatalf("restored meta's data group %+v", g)
	}
	if f := rn.State().Reader().MetaFounders(); len(f) != 1 || f[0].ID != rn.ID {
		t.Fatalf("restored data log's meta founders %v", f)
	}
	q, err := rn.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "jobs"})
	if err != nil || q.GetQueue().GetStats().GetReady() != 2 { // the source's and the restored node's
		t.Fatalf("restored queue jobs: %v %v", q, err)
	}
	dst.Stop()

	// The previous releases' file: the data group alone restores as before
	// (meta seeded from the data log's copy frozen at the handover, which
	// has no token made since).
	old := restoredNode(t, dataOnly)
	on := old.Nodes[0]
	if !on.Host.Meta().FSM().Seeded() {
		t.Fatal("meta not seeded on a node restored from a data-only file")
	}
	if err := enqueue(on, testBoot, "jobs"); err != nil {
		t.Fatalf("a data-only restore: %v", err)
	}
	if err := enqueue(on, ct.Token, "jobs"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a token made after the handover, restored from a data-only file: %v, want UNAUTHENTICATED (it was never in it)", err)
	}
	q, err = on.Broker.GetQueue(withBearer(ctx, testBoot), &raftqv1.GetQueueRequest{Name: "jobs"})
	if err != nil || q.GetQueue().GetStats().GetReady() != 2 {
		t.Fatalf("queue jobs restored from the data-only file: %v %v", q, err)
	}
}

// metaSectionOffset is where a format-2 file's meta section begins (its
// info record).
func metaSectionOffset(t *testing.T, file []byte) int {
	t.Helper()
	if !bytes.HasPrefix(file, []byte(backupMagic2)) {
		t.Fatal("not a file with a meta section")
	}
	r := bytes.NewReader(file[len(backupMagic2):])
	for {
		at := len(file) - r.Len()
		m := &raftqv1.BackupChunk{}
		if err := (protodelim.UnmarshalOptions{MaxSize: maxBackupRecord}).UnmarshalFrom(r, m); err != nil {
			t.Fatalf("no meta section: %v", err)
		}
		if m.GetInfo().GetGroup() == "meta" {
			return at
		}
	}
}

// withMetaState is file with its meta section's data replaced by state,
// framed and summed right: a file intact as a file, whose meta state is
// what it is.
func withMetaState(t *testing.T, file, state []byte) []byte {
	t.Helper()
	at := metaSectionOffset(t, file)
	r := bytes.NewReader(file[at:])
	info := &raftqv1.BackupChunk{}
	if err := (protodelim.UnmarshalOptions{MaxSize: maxBackupRecord}).UnmarshalFrom(r, info); err != nil {
		t.Fatal(err)
	}
	out := bytes.NewBuffer(slices.Clone(file[:at]))
	sum := sha256.Sum256(state)
	for _, rec := range []*raftqv1.BackupChunk{info, {Data: state}, {Sha256: hex.EncodeToString(sum[:]), Size: int64(len(state))}} {
		if _, err := protodelim.MarshalTo(out, rec); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// FuzzBackupFile: reading a backup file never panics, whatever its bytes;
// a file it accepts has a data section and, if it has a meta section, a
// meta state re-founded for the node.
func FuzzBackupFile(f *testing.F) {
	rec := func(b *bytes.Buffer, m *raftqv1.BackupChunk) {
		if _, err := protodelim.MarshalTo(b, m); err != nil {
			f.Fatal(err)
		}
	}
	section := func(b *bytes.Buffer, info *raftqv1.BackupInfo, data []byte) {
		rec(b, &raftqv1.BackupChunk{Info: info})
		rec(b, &raftqv1.BackupChunk{Data: data})
		sum := sha256.Sum256(data)
		rec(b, &raftqv1.BackupChunk{Sha256: hex.EncodeToString(sum[:]), Size: int64(len(data))})
	}
	var v1, v2 bytes.Buffer
	v1.WriteString(backupMagic)
	section(&v1, &raftqv1.BackupInfo{Index: 9, Term: 2, ClusterVersion: 20, Group: "data"}, []byte("state"))
	v2.WriteString(backupMagic2)
	section(&v2, &raftqv1.BackupInfo{Index: 9, Term: 2, ClusterVersion: 21, Group: "data"}, []byte("state"))
	mf := meta.New(meta.Options{})
	seed, err := meta.Encode(&metav1.Command{Op: &metav1.Command_Seed{Seed: &metav1.Seed{ClusterVersion: 21, LegacyGroup: "data", LegacyReplicas: []string{"a", "b"}, Queues: []string{"q"}}}}, 0, 1)
	if err != nil {
		f.Fatal(err)
	}
	if r := mf.Apply(&raft.Log{Index: 4, Type: raft.LogCommand, Data: seed}).(*meta.Result); r.Err != nil {
		f.Fatal(r.Err)
	}
	mb, err := mf.Backup()
	if err != nil {
		f.Fatal(err)
	}
	section(&v2, &raftqv1.BackupInfo{Index: 4, Term: 2, ClusterVersion: 21, Group: "meta"}, mb.State)
	if br, err := newBackupReader("seed", bytes.NewReader(v2.Bytes())); err != nil {
		f.Fatal(err)
	} else if got, err := checkBackup(br, "r1"); err != nil || got.meta == nil {
		f.Fatalf("the seed file with a meta section is refused: %v", err)
	}
	f.Add(v1.Bytes())
	f.Add(v2.Bytes())
	f.Add(v2.Bytes()[:v2.Len()-5])
	f.Add([]byte(backupMagic2))
	f.Fuzz(func(t *testing.T, b []byte) {
		br, err := newBackupReader("fuzz", bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, errBadBackup) {
				t.Fatalf("an unreadable file's error does not say so: %v", err)
			}
			return
		}
		got, err := checkBackup(br, "r1")
		if err != nil {
			return
		}
		if got.data == nil || got.data.Index == 0 || br.sections == 2 && (got.meta == nil || got.meta.Index != got.metaInfo.Index) {
			t.Fatalf("accepted %+v", got)
		}
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("reading past an accepted file's end: %v", err)
		}
	})
}
