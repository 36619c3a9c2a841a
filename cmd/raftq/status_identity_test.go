package main

import (
	"bytes"
	"strings"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// cluster status shows the cluster id and, under NOT ADMITTED, every
// gossip member kept out of the cluster with why; neither when there is
// none (a caller who is not an admin gets neither).
func TestPrintStatusShowsClusterIdentity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		st      *raftqv1.StatusResponse
		want    []string
		notWant []string
	}{
		{"refused members", &raftqv1.StatusResponse{
			LeaderId: "lone", ClusterId: "0123456789abcdef0123456789abcdef",
			Nodes: []*raftqv1.Node{{Id: "lone", State: "leader", Suffrage: "voter", Healthy: true}},
			RefusedMembers: []*raftqv1.RefusedMember{
				{Id: "n2", GossipAddr: "127.0.0.1:7412", Reason: "it presents no cluster id"},
				{Id: "b1", GossipAddr: "127.0.0.1:9002", ClusterId: "fedcba9876543210fedcba9876543210", Reason: "it belongs to another cluster"},
			},
		}, []string{"cluster id: 0123456789abcdef0123456789abcdef", "NOT ADMITTED", "n2", "127.0.0.1:7412", "it presents no cluster id", "fedcba9876543210fedcba9876543210"}, nil},
		{"none refused", &raftqv1.StatusResponse{LeaderId: "lone", ClusterId: "0123456789abcdef0123456789abcdef"},
			[]string{"cluster id: 0123456789abcdef0123456789abcdef"}, []string{"NOT ADMITTED"}},
		{"withheld", &raftqv1.StatusResponse{LeaderId: "lone", Withheld: true}, nil, []string{"cluster id:", "NOT ADMITTED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printStatus(&b, tc.st); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in:\n%s", w, b.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(b.String(), w) {
					t.Errorf("%q in:\n%s", w, b.String())
				}
			}
		})
	}
}

// cluster status shows each node's zone in its last column, "-" for a
// node that declares none; a caller who is not an admin is told the
// column is withheld.
func TestPrintStatusShowsZone(t *testing.T) {
	var b bytes.Buffer
	st := &raftqv1.StatusResponse{LeaderId: "n1", Nodes: []*raftqv1.Node{
		{Id: "n1", State: "leader", Suffrage: "voter", Healthy: true, GrpcAddr: "g1", RaftAddr: "r1", HttpAddr: "h1", Zone: "eu-1"},
		{Id: "n2", State: "follower", Suffrage: "voter", Healthy: true, GrpcAddr: "g2", RaftAddr: "r2", HttpAddr: "h2"},
	}}
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	cols := map[string][]string{}
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "ID" || f[0] == "n1" || f[0] == "n2") {
			cols[f[0]] = f
		}
	}
	for id, want := range map[string]string{"ID": "ZONE", "n1": "eu-1", "n2": "-"} {
		if f := cols[id]; len(f) != 13 || f[12] != want {
			t.Errorf("%s row %q: want 13 columns, the last %q, in:\n%s", id, f, want, b.String())
		}
	}
	b.Reset()
	if err := printStatus(&b, &raftqv1.StatusResponse{LeaderId: "n1", Withheld: true, Nodes: st.GetNodes()}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "VERSION, ZONE and") || strings.Contains(b.String(), "eu-1") {
		t.Errorf("withheld status shows the zone or does not name it withheld:\n%s", b.String())
	}
}
