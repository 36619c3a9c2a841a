package cluster

import (
	"testing"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{NodeID: "a", DataDir: "d", GossipBind: "127.0.0.1:2"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	// The Raft settings stay zero here: raftgroup fills them
	// (raftgroup's TestConfigDefaults).
	if c.BootstrapExpect != 1 || c.DeadNodeTimeout != DefaultDeadNodeTimeout || c.SnapshotThreshold != 0 ||
		c.TrailingLogs != 0 || c.HeartbeatTimeout != 0 || c.ElectionTimeout != 0 ||
		c.LeaderLeaseTimeout != 0 || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	for _, bad := range []Config{
		{DataDir: "d", GossipBind: "127.0.0.1:2"},
		{NodeID: "a", GossipBind: "127.0.0.1:2"},
		{NodeID: "a", DataDir: "d", GossipBind: "nope"},
		{NodeID: "a", DataDir: "d", GossipBind: "127.0.0.1:2", BootstrapExpect: -1},
		{NodeID: "a", DataDir: "d", GossipBind: "127.0.0.1:2", Zone: "Not_A_Zone"}, // membership.CheckZone
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

// The zone is checked and handed to gossip as it is.
func TestConfigZone(t *testing.T) {
	c, err := Config{NodeID: "a", DataDir: "d", GossipBind: "127.0.0.1:2", Zone: "eu-1"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.membership(nil).Zone; got != "eu-1" {
		t.Fatalf("gossip config zone %q, want eu-1", got)
	}
}
