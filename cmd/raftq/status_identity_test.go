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
