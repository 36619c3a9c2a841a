package membership

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

// TestLeadsInMetadata: the groups a node leads are advertised sorted and
// deduplicated, read back from a member's metadata by GroupLeader (the
// lowest node id on a stale double claim, none for a failed member), and
// a list too long for memberlist's limit is cut from its end so the rest
// of the metadata still goes out.
func TestLeadsInMetadata(t *testing.T) {
	m, err := New(Config{NodeID: "n1", GRPCAdvertise: "127.0.0.1:9"}, slog.New(slog.DiscardHandler), "127.0.0.1:1", false, false)
	if err != nil {
		t.Fatal(err)
	}
	m.SetLeads([]string{"g2", "data", "g2"})
	if got := m.localMeta().Leads; got != "data,g2" {
		t.Fatalf("advertised leads %q", got)
	}
	if id, addr, ok := m.GroupLeader("g2"); !ok || id != "n1" || addr != "127.0.0.1:9" {
		t.Fatalf("own group: %q %q %v", id, addr, ok)
	}
	heard := func(id string, state MemberState, leads string) {
		b, err := json.Marshal(Meta{ID: id, Raft: "127.0.0.1:1", GRPC: "grpc-of-" + id, IDs: true, Leads: leads})
		if err != nil {
			t.Fatal(err)
		}
		m.update(&memberlist.Node{Name: id, Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: b}, state, true)
	}
	heard("n3", Alive, "g7")
	heard("n2", Alive, "g5,g7")
	heard("n4", Failed, "g9")
	for _, tc := range []struct {
		group, id string
		ok        bool
	}{{"g5", "n2", true}, {"g7", "n2", true}, {"g9", "", false}, {"g1", "", false}} {
		id, addr, ok := m.GroupLeader(tc.group)
		if id != tc.id || ok != tc.ok || (ok && addr != "grpc-of-"+tc.id) {
			t.Errorf("GroupLeader(%s) = %q %q %v, want %q %v", tc.group, id, addr, ok, tc.id, tc.ok)
		}
	}

	// 200 groups do not fit: a prefix does, and the rest is left out.
	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("g%03d", i))
	}
	meta := m.localMeta()
	meta.Leads = strings.Join(many, ",")
	b, cut, err := fitLeads(meta, memberlist.MetaMaxSize)
	if err != nil || len(b) > memberlist.MetaMaxSize || cut == 0 || cut == len(many) {
		t.Fatalf("fitLeads: %d bytes, %d cut, %v", len(b), cut, err)
	}
	var back Meta
	if err := json.Unmarshal(b, &back); err != nil || back.Leads != strings.Join(many[:len(many)-cut], ",") || back.ID != "n1" {
		t.Fatalf("cut metadata: %+v %v", back, err)
	}
}
