package testcluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestStatusShowsZones: every node's Status, leader's and followers'
// alike, reports the zone each node declares (Cluster.Zone, serve's
// --zone) as gossip carries it: "" for the node that declares none, and
// a node restarted with another zone is seen in its new one everywhere.
func TestStatusShowsZones(t *testing.T) {
	var mu sync.Mutex
	zones := map[string]string{"n1": "zone-a", "n2": "zone-b", "n3": ""}
	zonesNow := func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for id, z := range zones {
			out[id] = z
		}
		return out
	}
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Adjust: func(id string, cfg *host.Config) {
		cfg.Node.ReplicaCheckInterval = -1
		mu.Lock()
		defer mu.Unlock()
		cfg.Node.Cluster.Zone = zones[id]
	}})
	everyNodeSees := func(want map[string]string) {
		t.Helper()
		harness.Eventually(t, 15*time.Second, func() error {
			for _, n := range c.Nodes {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				st, err := n.Admin.Status(ctx, &raftqv1.StatusRequest{LocalOnly: true})
				cancel()
				if err != nil {
					return fmt.Errorf("status at %s: %w", n.ID, err)
				}
				got := map[string]string{}
				for _, node := range st.GetNodes() {
					got[node.GetId()] = node.GetZone()
				}
				if len(got) != len(want) {
					return fmt.Errorf("%s reports nodes %v, want %v", n.ID, got, want)
				}
				for id, z := range want {
					if g, ok := got[id]; !ok || g != z {
						return fmt.Errorf("%s reports %s in zone %q, want %q", n.ID, id, g, z)
					}
				}
			}
			return nil
		})
	}
	everyNodeSees(zonesNow())

	mu.Lock()
	zones["n3"] = "zone-c"
	mu.Unlock()
	c.Restart(c.ByID("n3"))
	c.WaitStable(30 * time.Second)
	everyNodeSees(zonesNow())
}
