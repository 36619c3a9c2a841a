package meta

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
)

// node is one FSM fed entries at increasing indexes.
type node struct {
	t     testing.TB
	f     *FSM
	index uint64
	now   int64
}

func newNode(t testing.TB) *node {
	return &node{t: t, f: New(Options{}), now: 1_000_000}
}

// apply proposes c under the newest version as the next entry.
func (n *node) apply(c *metav1.Command) *Result {
	n.t.Helper()
	b, err := Encode(c, 0, n.now)
	if err != nil {
		n.t.Fatal(err)
	}
	return n.raw(b)
}

func (n *node) raw(b []byte) *Result {
	n.index++
	n.now += 7
	return n.f.Apply(&raft.Log{Index: n.index, Term: 1, Type: raft.LogCommand, Data: b}).(*Result)
}

// snapshotBytes persists the FSM's snapshot to memory.
func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	s.Release()
	return sink.Bytes()
}

// restored is a new FSM restored from f's snapshot.
func restored(t testing.TB, f *FSM) *FSM {
	t.Helper()
	g := New(Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	return g
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// Command builders.
func seedCmd(sd *metav1.Seed) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_Seed{Seed: sd}}
}
func emptySeed() *metav1.Command { return seedCmd(&metav1.Seed{ClusterVersion: 20}) }
func register(id string, reps ...string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_RegisterGroup{RegisterGroup: &metav1.RegisterGroup{Group: id, Replicas: reps}}}
}
func setReplicas(id string, epoch uint64, reps ...string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_SetGroupReplicas{SetGroupReplicas: &metav1.SetGroupReplicas{Group: id, Replicas: reps, ExpectedEpoch: epoch}}}
}
func removeGroup(id, key string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_RemoveGroup{RemoveGroup: &metav1.RemoveGroup{Group: id, IdempotencyKey: key}}}
}
func place(q, g string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_PlaceQueue{PlaceQueue: &metav1.PlaceQueue{Queue: q, Group: g}}}
}
func drop(q, g string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_DropPlacement{DropPlacement: &metav1.DropPlacement{Queue: q, Group: g}}}
}
func member(id, zone string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_SetMember{SetMember: &metav1.SetMember{NodeId: id, RaftAddr: id + ":7401", ApiAddr: id + ":7400", Zone: zone}}}
}
func removeMember(id string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_RemoveMember{RemoveMember: &metav1.RemoveMember{NodeId: id}}}
}
func settings(ss *metav1.SetSettings) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_SetSettings{SetSettings: ss}}
}
func clusterVersion(v uint32) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_SetClusterVersion{SetClusterVersion: &metav1.SetClusterVersion{Version: v}}}
}
func createToken(name, ident string, hashByte byte, expires int64, key string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{
		Name: name, Identity: ident, Sha256: bytes.Repeat([]byte{hashByte}, 32), ExpiresUnixMs: expires, IdempotencyKey: key}}}
}
func revokeToken(name, key string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: name, IdempotencyKey: key}}}
}
func grant(ident, pattern string, perms uint32, admin bool, key string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{Identity: ident, Pattern: pattern, Perms: perms, Admin: admin, IdempotencyKey: key}}}
}
func ungrant(ident, pattern string, admin bool, key string) *metav1.Command {
	return &metav1.Command{Op: &metav1.Command_AuthUngrant{AuthUngrant: &fsmv1.AuthUngrant{Identity: ident, Pattern: pattern, Admin: admin, IdempotencyKey: key}}}
}
func u32(v uint32) *uint32 { return &v }
func i64(v int64) *int64   { return &v }
