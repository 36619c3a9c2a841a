package raftgroup

import (
	"testing"
	"time"

	"github.com/raftq/raftq/raftmux"
)

// The Raft settings a node leaves zero get the runtime's defaults (moved
// from cluster's TestConfigDefaults with the defaulting itself).
func TestConfigDefaults(t *testing.T) {
	c, err := Config{Group: "data", NodeID: "a", Dir: "d", Port: &raftmux.Mux{}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.SnapshotThreshold != 8192 || c.SnapshotInterval != DefaultSnapshotInterval || c.TrailingLogs != 10240 ||
		c.HeartbeatTimeout != time.Second || c.ElectionTimeout != time.Second ||
		c.LeaderLeaseTimeout != 500*time.Millisecond {
		t.Fatalf("defaults: %+v", c)
	}
	// A heartbeat timeout given alone bounds the others as before.
	c, err = Config{Group: "data", NodeID: "a", Dir: "d", Port: &raftmux.Mux{}, HeartbeatTimeout: 3 * time.Second}.withDefaults()
	if err != nil || c.ElectionTimeout != 3*time.Second || c.LeaderLeaseTimeout != 500*time.Millisecond {
		t.Fatalf("with a 3s heartbeat: election %v, lease %v, %v", c.ElectionTimeout, c.LeaderLeaseTimeout, err)
	}
	for _, bad := range []Config{
		{NodeID: "a", Dir: "d", Port: &raftmux.Mux{}},
		{Group: "data", Dir: "d", Port: &raftmux.Mux{}},
		{Group: "data", NodeID: "a", Port: &raftmux.Mux{}},
		{Group: "data", NodeID: "a", Dir: "d"},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
