package raftgroup

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestAloneVoter(t *testing.T) {
	v := func(id string) raft.Server { return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id)} }
	nv := func(id string) raft.Server { return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id)} }
	for _, c := range []struct {
		name    string
		servers []raft.Server
		want    bool
	}{
		{"empty", nil, false},
		{"self alone", []raft.Server{v("a")}, true},
		{"self with nonvoters", []raft.Server{v("a"), nv("b"), nv("c")}, true},
		{"another voter alone", []raft.Server{v("b"), nv("a")}, false},
		{"two voters", []raft.Server{v("a"), v("b")}, false},
		{"three voters", []raft.Server{v("a"), v("b"), v("c")}, false},
	} {
		if got := aloneVoter(raft.Configuration{Servers: c.servers}, "a"); got != c.want {
			t.Errorf("%s: aloneVoter = %v, want %v", c.name, got, c.want)
		}
	}
}
