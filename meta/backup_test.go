package meta

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/raftq/raftq/acl"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	"google.golang.org/protobuf/proto"
)

// legacyState is a seeded meta state of a three-node cluster: the legacy
// group on n1..n3, members, a token and a grant made after the seed, a
// setting and a keyed write.
func legacyState(t testing.TB) *node {
	t.Helper()
	n := newNode(t)
	for _, c := range []*metav1.Command{
		seedCmd(&metav1.Seed{ClusterVersion: 21, LegacyGroup: LegacyGroupID, LegacyReplicas: []string{"n2", "n1", "n3"}, Queues: []string{"jobs"}}),
		member("n1", "a"), member("n2", "b"),
		createToken("ci", "bot", 7, 0, "k1"),
		grant("bot", "jobs*", uint32(acl.PermProduce), false, ""),
		settings(&metav1.SetSettings{MaxQueues: i64(42)}),
		place("later", LegacyGroupID),
	} {
		if r := n.apply(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return n
}

// TestBackupIsCanonicalOnEveryReplica: two replicas fed the same entries
// back up to the same bytes, whose SHA-256 is the digest each reports;
// the bytes restore to the same state.
func TestBackupIsCanonicalOnEveryReplica(t *testing.T) {
	log := randomLog(11, 300)
	x, y := newNode(t), newNode(t)
	x.apply(emptySeed())
	y.apply(emptySeed())
	for _, b := range log {
		x.raw(b)
		y.raw(b)
	}
	bx, err := x.f.Backup()
	if err != nil {
		t.Fatal(err)
	}
	by, err := y.f.Backup()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bx.State, by.State) || bx.Index != by.Index || bx.Index != x.index || !bx.Seeded {
		t.Fatalf("replicas back up differently: %d/%d bytes at %d/%d", len(bx.State), len(by.State), bx.Index, by.Index)
	}
	if sha256.Sum256(bx.State) != x.f.Digest() {
		t.Fatal("the backup's SHA-256 is not the replica's digest")
	}
	r := New(Options{})
	if err := r.Restore(io.NopCloser(bytes.NewReader(bx.State))); err != nil {
		t.Fatal(err)
	}
	if r.Digest() != x.f.Digest() {
		t.Fatal("the backup restores to another state")
	}
}

// TestRefound: a backup re-founded for node r1 keeps auth, settings and
// placements, makes r1 the legacy group's only replica (epoch +1) and
// drops the other members; it is canonical, and re-founding it again
// changes nothing. Bad input is refused with ErrInvalid, a state at
// another index with ErrBackupMismatch.
func TestRefound(t *testing.T) {
	n := legacyState(t)
	bk, err := n.f.Backup()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Refound(bk.State, bk.Index, "r1")
	if err != nil {
		t.Fatal(err)
	}
	f := New(Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
		t.Fatal(err)
	}
	g, ok := f.Group(LegacyGroupID)
	if !ok || !slices.Equal(g.Replicas, []string{"r1"}) || g.Epoch != 2 {
		t.Fatalf("legacy group after refound %+v", g)
	}
	if m := f.Members(); len(m) != 0 {
		t.Fatalf("members after refound %+v", m)
	}
	if !f.Seeded() || f.AppliedIndex() != bk.Index || f.ClusterVersion() != 21 || f.Settings().MaxQueues != 42 {
		t.Fatalf("refounded state: seeded %v, index %d, version %d, settings %+v", f.Seeded(), f.AppliedIndex(), f.ClusterVersion(), f.Settings())
	}
	if _, ok := f.Auth().LookupToken([32]byte(bytes.Repeat([]byte{7}, 32))); !ok || !f.Auth().Allowed("bot", acl.PermProduce, "jobs.x") {
		t.Fatal("the token or the grant did not survive")
	}
	if p, ok, _ := f.Lookup("later"); !ok || p.Group != LegacyGroupID {
		t.Fatal("a placement did not survive")
	}
	again, err := Refound(out, bk.Index, "r1")
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("re-founding twice: %v, equal %v", err, bytes.Equal(again, out))
	}
	// A node that was a member stays one.
	if out, err := Refound(bk.State, bk.Index, "n2"); err != nil {
		t.Fatal(err)
	} else {
		f := New(Options{})
		if err := f.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
			t.Fatal(err)
		}
		if m := f.Members(); len(m) != 1 || m[0].NodeID != "n2" {
			t.Fatalf("members %+v", m)
		}
	}

	unseeded, _ := New(Options{}).Backup()
	withGroup := legacyState(t)
	if r := withGroup.apply(register("g7", "n1")); r.Err != nil {
		t.Fatal(r.Err)
	}
	// An empty group of the pool goes (the restored pool makes its own).
	if out, err := Refound(must(withGroup.f.Backup()).State, withGroup.index, "r1"); err != nil {
		t.Fatal(err)
	} else if f := restoredFrom(t, out); len(must2(f.Groups())) != 1 {
		t.Fatalf("groups after re-founding a state with an empty pool group: %v", must2(f.Groups()))
	}
	if r := withGroup.apply(place("elsewhere", "g7")); r.Err != nil {
		t.Fatal(r.Err)
	}
	wg, _ := withGroup.f.Backup()
	st := &metav1.State{}
	if err := proto.Unmarshal(bk.State, st); err != nil {
		t.Fatal(err)
	}
	st.Format = SnapshotFormat + 1
	newer, _ := proto.Marshal(st)
	for name, tc := range map[string]struct {
		state []byte
		index uint64
		node  string
		want  error
	}{
		"truncated":               {bk.State[:len(bk.State)-3], bk.Index, "r1", ErrInvalid},
		"garbage":                 {[]byte("not a state"), bk.Index, "r1", ErrInvalid},
		"another index":           {bk.State, bk.Index + 1, "r1", ErrBackupMismatch},
		"unseeded":                {unseeded.State, 0, "r1", ErrInvalid},
		"queues on another group": {wg.State, wg.Index, "r1", ErrInvalid},
		"bad node id":             {bk.State, bk.Index, "", ErrInvalid},
		"newer format":            {newer, bk.Index, "r1", ErrNewerVersion},
	} {
		if _, err := Refound(tc.state, tc.index, tc.node); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

func must(b Backup, err error) Backup {
	if err != nil {
		panic(err)
	}
	return b
}

func must2(g []*Group, _ string) []*Group { return g }

func restoredFrom(t *testing.T, state []byte) *FSM {
	t.Helper()
	f := New(Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(state))); err != nil {
		t.Fatal(err)
	}
	return f
}

// FuzzRefound: Refound never panics; what it accepts is a seeded state
// that restores, with the node as the legacy group's only replica, and
// re-founding it again gives the same bytes.
func FuzzRefound(f *testing.F) {
	n := legacyState(f)
	bk, _ := n.f.Backup()
	f.Add(bk.State, bk.Index)
	f.Add(bk.State[:len(bk.State)/2], bk.Index)
	f.Add([]byte{}, uint64(0))
	f.Add([]byte{0x08, 0x01, 0x10, 0x05, 0x18, 0x01}, uint64(5))
	f.Fuzz(func(t *testing.T, state []byte, index uint64) {
		out, err := Refound(state, index, "r1")
		if err != nil {
			return
		}
		g := New(Options{})
		if err := g.Restore(io.NopCloser(bytes.NewReader(out))); err != nil {
			t.Fatalf("a re-founded state does not restore: %v", err)
		}
		_, legacy := g.Groups()
		lg, ok := g.Group(legacy)
		if !g.Seeded() || g.AppliedIndex() != index || !ok || !slices.Equal(lg.Replicas, []string{"r1"}) {
			t.Fatalf("re-founded state: seeded %v, index %d (want %d), legacy group %+v", g.Seeded(), g.AppliedIndex(), index, lg)
		}
		again, err := Refound(out, index, "r1")
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("re-founding twice: %v", err)
		}
	})
}
