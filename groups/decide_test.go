package groups

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
)

func ids(gs []*meta.Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.ID)
	}
	return out
}

// TestPlan: which groups a node opens and which it departs, from meta's
// records and what runs here.
func TestPlan(t *testing.T) {
	rec := func(id string, replicas ...string) *meta.Group {
		return &meta.Group{ID: id, Replicas: replicas, Epoch: 1}
	}
	for _, tc := range []struct {
		name       string
		records    []*meta.Group
		running    []string
		open, gone []string
	}{
		{"nothing", nil, nil, nil, nil},
		{"named: open", []*meta.Group{rec("g2", "n1", "n2"), rec("g1", "n1")}, nil, []string{"g1", "g2"}, nil},
		{"not named: never opened", []*meta.Group{rec("g1", "n2", "n3")}, nil, nil, nil},
		{"running: idempotent", []*meta.Group{rec("g1", "n1", "n2")}, []string{"g1"}, nil, nil},
		{"dropped from the record: depart", []*meta.Group{rec("g1", "n2", "n3")}, []string{"g1"}, nil, []string{"g1"}},
		{"record removed: depart", nil, []string{"g1"}, nil, []string{"g1"}},
		{"the legacy group is the host's", []*meta.Group{rec("data", "n1"), rec("old", "n1")}, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			running := map[string]bool{}
			for _, id := range tc.running {
				running[id] = true
			}
			open, gone := plan("n1", tc.records, "old", running)
			if !slices.Equal(ids(open), tc.open) || !slices.Equal(gone, tc.gone) {
				t.Fatalf("open %v depart %v, want %v %v", ids(open), gone, tc.open, tc.gone)
			}
		})
	}
}

// TestDepartAction: a group whose record dropped this node waits for the
// leader's removal, deletes its state
// once removed or once meta forgot the group, and closes keeping its
// state when the removal never arrives.
func TestDepartAction(t *testing.T) {
	grace := 30 * time.Second
	for _, tc := range []struct {
		name                string
		exists, known, self bool
		since               time.Duration
		want                action
	}{
		{"removal not seen yet", true, true, true, time.Second, actWait},
		{"configuration unreadable", true, false, false, time.Second, actWait},
		{"removed from the configuration", true, true, false, time.Second, actCloseDelete},
		{"the removal never came", true, true, true, grace, actClose},
		{"group gone from meta", false, true, true, 0, actCloseDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := departAction(tc.exists, tc.known, tc.self, tc.since, grace); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestNextChange: the placed group leader's one change at a time toward
// the record.
func TestNextChange(t *testing.T) {
	v := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter} }
	nv := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Nonvoter} }
	known := func(id string) string {
		if id == "n9" {
			return "" // no address yet
		}
		return "addr-" + id
	}
	for _, tc := range []struct {
		name     string
		replicas []string
		servers  []raft.Server
		want     change
	}{
		{"in step", []string{"n1", "n2", "n3"}, []raft.Server{v("n1"), v("n2"), v("n3")}, change{}},
		{"leader dropped: hand over to a voter of the record", []string{"n3", "n2"}, []raft.Server{v("n1"), v("n2"), v("n3")}, change{handOver: "n3"}},
		{"leader dropped, no voter of the record yet: add one", []string{"n4"}, []raft.Server{v("n1"), v("n2")}, change{add: "n4"}},
		{"leader dropped: promote the record's nonvoter", []string{"n4"}, []raft.Server{v("n1"), nv("n4")}, change{promote: []string{"n4"}}},
		{"leader dropped: never removes itself", []string{"n2"}, []raft.Server{v("n1"), nv("n2")}, change{promote: []string{"n2"}}},
		{"missing: add as nonvoter", []string{"n1", "n2", "n4"}, []raft.Server{v("n1"), v("n2"), v("n3")}, change{add: "n4"}},
		{"missing without an address: wait for it", []string{"n1", "n2", "n9"}, []raft.Server{v("n1"), v("n2")}, change{}},
		{"nonvoter of the record: promote before removing", []string{"n1", "n2", "n4"}, []raft.Server{v("n1"), v("n2"), v("n3"), nv("n4")}, change{promote: []string{"n4"}}},
		{"then remove the extra voter", []string{"n1", "n2", "n4"}, []raft.Server{v("n1"), v("n2"), v("n3"), v("n4")}, change{remove: "n3"}},
		{"drop one of three", []string{"n1", "n2"}, []raft.Server{v("n1"), v("n2"), v("n3")}, change{remove: "n3"}},
		{"extra nonvoter first", []string{"n1", "n2"}, []raft.Server{v("n1"), v("n2"), v("n3"), nv("n5")}, change{remove: "n5"}},
		{"never below a quorum of the record", []string{"n1", "n4", "n5"}, []raft.Server{v("n1"), v("n2"), v("n3")}, change{add: "n4"}},
		{"a quorum of the record left: remove", []string{"n1", "n9", "n8"}, []raft.Server{v("n1"), v("n2"), v("n3"), v("n8")}, change{remove: "n2"}},
		{"below a quorum of the record: keep the extra voters", []string{"n1", "n9"}, []raft.Server{v("n1"), v("n2"), v("n3")}, change{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nextChange("n1", tc.replicas, tc.servers, known)
			if got.handOver != tc.want.handOver || got.add != tc.want.add || got.remove != tc.want.remove || !slices.Equal(got.promote, tc.want.promote) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestFounders: a founder's configuration names every replica as a voter
// at its Raft address, or waits for a missing address.
func TestFounders(t *testing.T) {
	rec := &meta.Group{ID: "g1", Replicas: []string{"n1", "n2", "n3"}, Epoch: 1}
	addr := map[string]string{"n2": "h2:7", "n3": "h3:7"}
	conf, missing := founders(rec, "n1", "h1:7", func(id string) string { return addr[id] })
	if missing != "" || len(conf.Servers) != 3 {
		t.Fatalf("conf %+v missing %q", conf, missing)
	}
	for i, want := range []string{"h1:7", "h2:7", "h3:7"} {
		if s := conf.Servers[i]; s.Suffrage != raft.Voter || string(s.Address) != want || string(s.ID) != rec.Replicas[i] {
			t.Fatalf("server %d: %+v", i, s)
		}
	}
	delete(addr, "n3")
	if _, missing := founders(rec, "n1", "h1:7", func(id string) string { return addr[id] }); missing != "n3" {
		t.Fatalf("missing %q, want n3", missing)
	}
}
