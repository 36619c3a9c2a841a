package fsm

import (
	"errors"
	"slices"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func settingsCmd(maxQueues int64, fromMeta bool) *fsmv1.Command {
	return &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: &fsmv1.SetClusterSettings{MaxQueues: &maxQueues, FromMeta: fromMeta}}}
}

// TestHandoverFreezesClusterWideState: the raise to HandoverVersion names
// the meta group's founders (refused without them, or with a server
// twice), which the state keeps through a snapshot; from it the auth
// commands and an unmarked SetClusterSettings are refused (ErrMoved) and
// change nothing, while the data leader's marked settings apply. Below it
// nothing changed: the same commands apply as they did.
func TestHandoverFreezesClusterWideState(t *testing.T) {
	h := newHarness(t)
	h.raise(HandoverVersion - 1)
	h.mustOK(createToken("alice-1", "alice", "secret-a", 0))
	h.mustOK(settingsCmd(50, false))
	h.create("q", nil)

	bad := [][]*fsmv1.MetaServer{
		nil,
		{{Id: "n1", Address: "a:1"}, {Id: "n1", Address: "b:1"}},
		{{Id: "n1", Address: "a:1"}, {Id: "n2", Address: "a:1"}},
		{{Id: "", Address: "a:1"}},
		{{Id: "n1"}},
	}
	for _, fs := range bad {
		cmd := &fsmv1.Command{Version: HandoverVersion, Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: HandoverVersion, MetaFounders: fs}}}
		if r := h.apply(cmd); !errors.Is(r.Failure(), ErrInvalid) {
			t.Fatalf("raise naming founders %v: %v", fs, r.Failure())
		}
		if v := h.f.Reader().ClusterVersion(); v != HandoverVersion-1 {
			t.Fatalf("a refused raise left cluster version %d", v)
		}
	}
	if _, ok := h.f.Reader().Handover(); ok {
		t.Fatal("a handover copy below the handover version")
	}

	founders := []*fsmv1.MetaServer{{Id: "n1", Address: "10.0.0.1:7000"}, {Id: "n2", Address: "10.0.0.2:7000"}, {Id: "n3", Address: "10.0.0.3:7000"}}
	h.version = HandoverVersion
	h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: HandoverVersion, MetaFounders: founders}}})
	want := []MetaServer{{ID: "n1", Address: "10.0.0.1:7000"}, {ID: "n2", Address: "10.0.0.2:7000"}, {ID: "n3", Address: "10.0.0.3:7000"}}
	if got := h.f.Reader().MetaFounders(); !slices.Equal(got, want) {
		t.Fatalf("founders %v, want %v", got, want)
	}

	before := stateDigest(t, h.f)
	for _, cmd := range []*fsmv1.Command{
		createToken("bob-1", "bob", "secret-b", 0),
		{Op: &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: "alice-1"}}},
		authGrant("alice", "q", PermProduce, false),
		authUngrant("alice", "q", false),
		settingsCmd(7, false),
	} {
		if r := h.apply(cmd); !errors.Is(r.Failure(), ErrMoved) {
			t.Fatalf("%T after the handover: %v, want ErrMoved", cmd.Op, r.Failure())
		}
	}
	// Entries refused change nothing but the applied index, which the
	// digest does not cover.
	if stateDigest(t, h.f) != before {
		t.Fatal("a refused command changed the state")
	}
	h.mustOK(settingsCmd(60, true))

	ho, ok := h.f.Reader().Handover()
	switch {
	case !ok:
		t.Fatal("no handover copy at the handover version")
	case ho.ClusterVersion != HandoverVersion || ho.MaxQueues != 60 || !slices.Equal(ho.Queues, []string{"q", "q.dlq"}):
		t.Fatalf("handover copy %+v", ho)
	case len(ho.Auth.GetTokens()) != 1 || ho.Auth.GetTokens()[0].GetName() != "alice-1":
		t.Fatalf("handover auth %v", ho.Auth)
	case ho.Index != h.index:
		t.Fatalf("handover copy at index %d, applied %d", ho.Index, h.index)
	}

	g := restoredCopy(t, h)
	if got := g.f.Reader().MetaFounders(); !slices.Equal(got, want) {
		t.Fatalf("restored founders %v", got)
	}
	if stateDigest(t, g.f) != stateDigest(t, h.f) {
		t.Fatal("a restored replica's digest differs")
	}
	if r := g.apply(createToken("bob-1", "bob", "secret-b", 0)); !errors.Is(r.Failure(), ErrMoved) {
		t.Fatalf("CreateToken on a restored replica: %v", r.Failure())
	}
}
