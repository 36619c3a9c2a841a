package membership

import (
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

// TestZoneInMetadata: the zone a node is configured with is in the
// metadata it advertises, and metadata with a zone, without one, and from
// a build before zones (no such key) reads back as the zone it names, ""
// for the last two, in the member table.
func TestZoneInMetadata(t *testing.T) {
	m, err := New(Config{NodeID: "n1", Zone: strings.Repeat("z", MaxZoneLen)}, slog.New(slog.DiscardHandler), "127.0.0.1:1", false, false)
	if err != nil {
		t.Fatalf("New with the longest zone: %v", err)
	}
	if got := m.localMeta().Zone; got != strings.Repeat("z", MaxZoneLen) {
		t.Fatalf("advertised zone %q", got)
	}

	marshal := func(meta Meta) []byte {
		b, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	noZone := marshal(Meta{ID: "n3", Raft: "127.0.0.1:1", IDs: true})
	if strings.Contains(string(noZone), "zone") {
		t.Fatalf("metadata without a zone carries the key: %s", noZone)
	}
	for _, tc := range []struct {
		name string
		meta []byte
		want string
	}{
		{"with a zone", marshal(Meta{ID: "n2", Raft: "127.0.0.1:1", IDs: true, Zone: "eu-1"}), "eu-1"},
		{"without one", noZone, ""},
		// As the build before zones advertised it.
		{"a build before zones", []byte(`{"id":"n4","raft":"127.0.0.1:7401","grpc":"127.0.0.1:7400","http":"127.0.0.1:7403",` +
			`"expect":3,"state":true,"log_version":20,"max_queued_bytes":1073741824,"version":"v0.1.0 (ade1f05)",` +
			`"cluster_id":"0123456789abcdef0123456789abcdef","ids":true,"run":"r1","mux":true}`), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var id struct{ ID string }
			if err := json.Unmarshal(tc.meta, &id); err != nil {
				t.Fatal(err)
			}
			rx := &Membership{log: slog.New(slog.DiscardHandler), members: map[string]*Record{}, changed: make(chan struct{})}
			rx.update(&memberlist.Node{Name: id.ID, Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: tc.meta}, Alive, true)
			rec, ok := rx.Records()[id.ID]
			if !ok || !rec.MetaOK {
				t.Fatalf("metadata %s not read: %+v", tc.meta, rec)
			}
			if rec.Meta.Zone != tc.want {
				t.Fatalf("zone %q, want %q", rec.Meta.Zone, tc.want)
			}
			if rec.Meta.ID != id.ID || rec.Meta.Raft == "" {
				t.Fatalf("the rest of the metadata lost: %+v", rec.Meta)
			}
			// And it survives a round trip as this build sends it.
			var again Meta
			if err := json.Unmarshal(marshal(rec.Meta), &again); err != nil || again != rec.Meta {
				t.Fatalf("round trip: %+v, %v; want %+v", again, err, rec.Meta)
			}
		})
	}
}

// TestCheckZone: what a zone may be named, at the edges of the rule.
func TestCheckZone(t *testing.T) {
	for zone, ok := range map[string]bool{
		"": true, "a": true, "9": true, "eu-west-1a": true, "a--b": true, strings.Repeat("a", MaxZoneLen): true,
		strings.Repeat("a", MaxZoneLen+1): false, "-a": false, "a-": false, "-": false, "A": false,
		"eu.1": false, "eu_1": false, "eu 1": false, "zoné": false, "a\n": false,
	} {
		if err := CheckZone(zone); (err == nil) != ok {
			t.Errorf("CheckZone(%q) = %v, want ok %t", zone, err, ok)
		}
	}
}
