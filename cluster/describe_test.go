package cluster

import (
	"testing"

	"github.com/hashicorp/raft"
)

func TestDescribeServers(t *testing.T) {
	got := describeServers([]raft.Server{
		{ID: "n1", Address: "127.0.0.1:7401", Suffrage: raft.Voter},
		{ID: "n2", Address: "127.0.0.1:7411", Suffrage: raft.Nonvoter},
	})
	if want := "n1@127.0.0.1:7401 (voter), n2@127.0.0.1:7411 (nonvoter)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
