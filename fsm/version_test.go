package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// fatalRecorder is an Options.Fatal that records instead of stopping.
type fatalRecorder struct{ errs []error }

func (r *fatalRecorder) fatal(err error) { r.errs = append(r.errs, err) }

func setVersion(v uint32) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: v}}}
}

func logOf(t testing.TB, index uint64, cmd *fsmv1.Command) *raft.Log {
	t.Helper()
	data, err := Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

// TestNewerEntryStopsTheNode: an entry of a log version newer than
// MaxLogVersion is never applied, nor is anything after it; the Fatal hook
// gets a message that says what to do.
func TestNewerEntryStopsTheNode(t *testing.T) {
	rec := &fatalRecorder{}
	h := newHarness(t)
	h.f = New(Options{Fatal: rec.fatal})
	h.create("q", nil)
	h.enqueuePayloads("q", "a")
	idx, before, _ := h.f.Integrity().Digest()

	newer := &fsmv1.Command{Version: MaxLogVersion + 1, NowMs: h.now + 5000, Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "q"}}}
	after := &fsmv1.Command{NowMs: h.now, Op: &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: "q"}}}
	out := h.f.ApplyBatch([]*raft.Log{logOf(t, idx+1, newer), logOf(t, idx+2, after)})
	for i, r := range out {
		if err := r.(Result).Failure(); !errors.Is(err, ErrHalted) {
			t.Fatalf("result %d: %v, want ErrHalted", i, err)
		}
	}
	if len(rec.errs) != 1 {
		t.Fatalf("Fatal called %d times, want once", len(rec.errs))
	}
	msg := rec.errs[0].Error()
	for _, want := range []string{"entry 3", fmt.Sprint("log version ", MaxLogVersion+1), fmt.Sprint("up to ", MaxLogVersion), "upgrade"} {
		if !strings.Contains(msg, want) {
			t.Errorf("fatal message %q does not say %q", msg, want)
		}
	}
	if !errors.Is(rec.errs[0], ErrNewerVersion) {
		t.Errorf("fatal error %v is not ErrNewerVersion", rec.errs[0])
	}
	// Nothing applied: not the newer entry, not the one after it, not even
	// the newer entry's clock.
	if gotIdx, got, _ := h.f.Integrity().Digest(); gotIdx != idx || got != before || h.f.Reader().Now() != h.now {
		t.Fatalf("state moved after a newer entry: index %d (was %d), digest changed %v, now %d", gotIdx, idx, got != before, h.f.Reader().Now())
	}
	if r := h.f.Apply(logOf(t, idx+3, after)).(Result); !errors.Is(r.Failure(), ErrHalted) {
		t.Fatalf("apply after halt: %v", r.Failure())
	}
	if len(rec.errs) != 1 {
		t.Fatalf("Fatal called again: %v", rec.errs)
	}
}

// TestNewerEntryPanicsByDefault: without a hook the FSM panics with the
// clear message rather than carrying on.
func TestNewerEntryPanicsByDefault(t *testing.T) {
	f := New(Options{})
	defer func() {
		r := recover()
		s, _ := r.(string)
		if !strings.Contains(s, fmt.Sprint("log version ", MaxLogVersion+1)) || !strings.Contains(s, "upgrade") {
			t.Fatalf("recovered %v, want the newer-version message", r)
		}
	}()
	f.Apply(logOf(t, 1, &fsmv1.Command{Version: MaxLogVersion + 1, Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}}))
	t.Fatal("applied an entry of a newer log version")
}

// TestSetClusterVersion: the command exists only from log version 2 on,
// only raises, and never past its own entry's version; the version is part
// of the state, its snapshots and its digest only once it is not 1.
func TestSetClusterVersion(t *testing.T) {
	h := newHarness(t)
	h.create("q", nil)
	_, v1Digest, _ := h.f.Integrity().Digest()

	// In a version-1 entry the command does not exist (as in the old build).
	if r := h.apply(setVersion(2)); !errors.Is(r.Failure(), ErrInvalid) || !strings.Contains(r.Failure().Error(), "unknown command") {
		t.Fatalf("SetClusterVersion in a version-1 entry: %v", r.Failure())
	}
	if h.f.Reader().ClusterVersion() != 1 {
		t.Fatalf("cluster version %d", h.f.Reader().ClusterVersion())
	}
	for _, tc := range []struct {
		name    string
		entry   uint32
		version uint32
		wantErr bool
		want    uint32
	}{
		{"past the entry's version", 2, 3, true, 1},
		{"not raising", 2, 1, true, 1},
		{"raise to 2", 2, 2, false, 2},
		{"again", 2, 2, true, 2},
		{"lower", 2, 1, true, 2},
	} {
		cmd := setVersion(tc.version)
		cmd.Version = tc.entry
		r := h.apply(cmd)
		if (r.Failure() != nil) != tc.wantErr || (r.Failure() != nil && !errors.Is(r.Failure(), ErrInvalid)) {
			t.Fatalf("%s: err %v, want error %v", tc.name, r.Failure(), tc.wantErr)
		}
		if got := h.f.Reader().ClusterVersion(); got != tc.want {
			t.Fatalf("%s: cluster version %d, want %d", tc.name, got, tc.want)
		}
	}
	_, v2Digest, _ := h.f.Integrity().Digest()
	if v2Digest == v1Digest {
		t.Fatal("the digest does not cover the cluster version")
	}

	snap := snapshotBytes(t, h.f)
	hdr := &fsmv1.SnapshotHeader{}
	if err := protodelim.UnmarshalFrom(bytes.NewReader(snap), hdr); err != nil {
		t.Fatal(err)
	}
	if hdr.Version != 2 || hdr.ClusterVersion != 2 {
		t.Fatalf("snapshot header %v, want format 2 with cluster version 2", hdr)
	}
	g := New(Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if g.Reader().ClusterVersion() != 2 || digestOf(t, g) != digestOf(t, h.f) {
		t.Fatalf("restored cluster version %d, digests equal %v", g.Reader().ClusterVersion(), digestOf(t, g) == digestOf(t, h.f))
	}
	if err := h.f.Integrity().Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestVersion2AppliesLikeVersion1: version 2 changes no rule but adds
// SetClusterVersion, so the same commands under either version give the
// same state.
func TestVersion2AppliesLikeVersion1(t *testing.T) {
	for seed := range 4 {
		a, b := New(Options{}), New(Options{})
		ga := &cmdGen{r: rand.New(rand.NewPCG(uint64(seed), 11)), f: a, now: 1_000, queues: []string{"a", "b", "shared", "a.dlq"}}
		for i := 1; i <= 300; i++ {
			cmd := ga.next()
			res := a.ApplyCommand(uint64(i), cmd)
			ga.observe(res)
			cmd2 := proto.Clone(cmd).(*fsmv1.Command)
			cmd2.Version = 2
			b.ApplyCommand(uint64(i), cmd2)
		}
		if digestOf(t, a) != digestOf(t, b) {
			t.Fatalf("seed %d: version-1 and version-2 entries gave different states", seed)
		}
	}
}

// TestNewerSnapshotStopsTheNode: a snapshot of a newer format, or of a
// cluster at a newer log version, is refused with a clear message and
// stops the node; the state is left as it was.
func TestNewerSnapshotStopsTheNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  *fsmv1.SnapshotHeader
		want string
	}{
		{"newer format (this build reads 1 to 7)", &fsmv1.SnapshotHeader{Version: 8}, "snapshot format version 8"},
		{"newer cluster", &fsmv1.SnapshotHeader{Version: 2, ClusterVersion: MaxLogVersion + 1}, fmt.Sprint("log version ", MaxLogVersion+1)},
		{"newer cluster, format 4", &fsmv1.SnapshotHeader{Version: 4, ClusterVersion: MaxLogVersion + 1}, fmt.Sprint("log version ", MaxLogVersion+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := protodelim.MarshalTo(&buf, tc.hdr); err != nil {
				t.Fatal(err)
			}
			rec := &fatalRecorder{}
			h := newHarness(t)
			h.f = New(Options{Fatal: rec.fatal})
			h.create("q", nil)
			before := digestOf(t, h.f)
			err := h.f.Restore(io.NopCloser(&buf))
			if !errors.Is(err, ErrNewerVersion) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "upgrade") {
				t.Fatalf("restore: %v", err)
			}
			if len(rec.errs) != 1 || !errors.Is(rec.errs[0], ErrNewerVersion) {
				t.Fatalf("Fatal calls: %v", rec.errs)
			}
			if digestOf(t, h.f) != before {
				t.Fatal("a refused snapshot changed the state")
			}
			if r := h.f.ApplyCommand(100, &fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}}); !errors.Is(r.Failure(), ErrHalted) {
				t.Fatalf("applied after a newer snapshot: %v", r.Failure())
			}
		})
	}
	// A malformed header (format 1 claiming a cluster version) is invalid,
	// not newer: refused without stopping the node.
	// So is a format that cannot hold its cluster version's state (format
	// 2 has no key order, which cluster version 3 keeps; format 3 no
	// leader clock, which version 4 keeps) or one of a later version.
	for _, hdr := range []*fsmv1.SnapshotHeader{{Version: 1, ClusterVersion: 2}, {Version: 2, ClusterVersion: 3}, {Version: 3, ClusterVersion: 2},
		{Version: 3, ClusterVersion: 4}, {Version: 4, ClusterVersion: 3}, {Version: 4, ClusterVersion: 5}, {Version: 5, ClusterVersion: 4},
		{Version: 6, ClusterVersion: DeleteKeyVersion}, {Version: 7, ClusterVersion: DeleteKeyVersion - 1}, {Version: 6, ClusterVersion: DeleteKeyVersion - 1, DeletedCount: 1}} {
		var buf bytes.Buffer
		_, _ = protodelim.MarshalTo(&buf, hdr)
		rec := &fatalRecorder{}
		f := New(Options{Fatal: rec.fatal})
		if err := f.Restore(io.NopCloser(&buf)); !errors.Is(err, ErrInvalid) || len(rec.errs) != 0 {
			t.Fatalf("restore of %v: %v, fatal %v", hdr, err, rec.errs)
		}
	}
}
