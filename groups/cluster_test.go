package groups_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/groups"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/metagroup"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/scheduler"
	"github.com/raftq/raftq/test/harness"

	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// atMetaLeader runs do at meta's leader, retried through elections and
// until meta is seeded.
func atMetaLeader(t *testing.T, c *testcluster.Cluster, do func(ctx context.Context, m *metagroup.Group) error) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			m := n.Host.Meta()
			if !m.Raft().LeaderReady() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return do(ctx, m)
		}
		return errors.New("no meta leader")
	})
}

// proposeMeta commits cmd into meta's log at its leader.
func proposeMeta(t *testing.T, c *testcluster.Cluster, cmd *metav1.Command) {
	t.Helper()
	atMetaLeader(t, c, func(ctx context.Context, m *metagroup.Group) error {
		_, err := m.Propose(ctx, cmd)
		return err
	})
}

// setSettings changes the cluster settings at meta's leader.
func setSettings(t *testing.T, c *testcluster.Cluster, ch metagroup.SettingsChange) {
	t.Helper()
	atMetaLeader(t, c, func(ctx context.Context, m *metagroup.Group) error {
		_, err := m.SetSettings(ctx, ch)
		return err
	})
}

// waitRecord waits until every node's meta replica records group id
// (with replicas want, when given) and returns its replicas.
func waitRecord(t *testing.T, c *testcluster.Cluster, id string, want ...string) []string {
	t.Helper()
	var got []string
	harness.Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			g, ok := n.Host.Meta().FSM().Group(id)
			if !ok {
				return fmt.Errorf("%s: no record of %s", n.ID, id)
			}
			if len(want) > 0 && !slices.Equal(g.Replicas, want) {
				return fmt.Errorf("%s: %s's replicas %v, want %v", n.ID, id, g.Replicas, want)
			}
			got = g.Replicas
		}
		return nil
	})
	return got
}

// groupOn is group id's broker on node n, nil if n does not run it.
func groupOn(n *testcluster.Node, id string) *broker.Broker {
	b, _ := n.Host.Groups().Get(id)
	return b
}

// voters is the voters and nonvoters of b's latest configuration.
func voters(b *broker.Broker) (vs, nonvoters []string) {
	servers, _ := raftgroup.LatestServers(b.Runtime().Group().Raft())
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			vs = append(vs, string(s.ID))
		} else {
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	slices.Sort(vs)
	return vs, nonvoters
}

// waitGroup waits until exactly the nodes want run group id, one of them
// leads it (its term established) with want as its voters, and returns
// the leader.
func waitGroup(t *testing.T, c *testcluster.Cluster, id string, want ...string) *testcluster.Node {
	t.Helper()
	var leader *testcluster.Node
	harness.Eventually(t, 30*time.Second, func() error {
		leader = nil
		for _, n := range c.Nodes {
			b := groupOn(n, id)
			if runs := slices.Contains(want, n.ID); runs != (b != nil) {
				return fmt.Errorf("%s runs %s: %v, want %v", n.ID, id, b != nil, runs)
			}
			if b != nil && b.Runtime().Group().LeaderReady() {
				leader = n
			}
		}
		if leader == nil {
			return fmt.Errorf("%s has no leader", id)
		}
		if vs, nv := voters(groupOn(leader, id)); !slices.Equal(vs, want) || len(nv) > 0 {
			return fmt.Errorf("%s voters %v nonvoters %v, want voters %v", id, vs, nv, want)
		}
		return nil
	})
	return leader
}

// TestPlacedGroup: a data group meta registers runs on exactly its
// replicas, serves the message path at its leader and replicates it, is
// found in gossip by every node, fails over, re-opens from DATA/groups
// after a restart, shrinks when the record drops replicas (those nodes
// close it and delete its state), and grows back through nonvoters
// promoted once caught up; a group whose record names one node never
// opens on the others. The records change through meta's pool duty
// (the groups and replicas settings), as in a cluster.
func TestPlacedGroup(t *testing.T) {
	start := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	phase("cluster stable")
	c.WaitClusterVersion(fsm.HandoverVersion)
	all := []string{"n1", "n2", "n3"}
	phase("meta ready")

	// Two groups: the legacy one and g1, which the pool would register
	// with the same replicas (a registration retried answers as the first).
	twoGroups := uint32(2)
	setSettings(t, c, metagroup.SettingsChange{Groups: &twoGroups})
	proposeMeta(t, c, &metav1.Command{Op: &metav1.Command_RegisterGroup{RegisterGroup: &metav1.RegisterGroup{Group: "g1", Replicas: all}}})
	leader := waitGroup(t, c, "g1", all...)
	phase("g1 running")

	// The message path through the g1 broker at its leader.
	g1 := groupOn(leader, "g1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := g1.Queues().CreateQueue(ctx, "jobs", &raftqv1.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	ids, err := g1.Enqueue(ctx, "jobs", []*raftqv1.EnqueueMessage{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}})
	if err != nil || len(ids) != 3 {
		t.Fatalf("enqueue: %v %v", ids, err)
	}
	cons, err := g1.Lease(ctx, scheduler.ConsumerRequest{Queue: "jobs", MaxInFlight: 2, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	var refs []broker.LeaseRef
	for len(refs) < 2 {
		if d, ok := cons.TakeOne(); ok {
			refs = append(refs, broker.LeaseRef{Queue: "jobs", MessageID: d.ID, Token: d.LeaseToken})
			continue
		}
		select {
		case <-cons.Ready():
		case <-ctx.Done():
			t.Fatalf("%d of 2 deliveries", len(refs))
		}
	}
	if res, err := g1.Ack(ctx, refs); err != nil || res[0] != nil || res[1] != nil {
		t.Fatalf("ack: %v %v", res, err)
	}
	cons.Close()
	// Replicated to every replica of g1, and to no other group: the
	// legacy group has no such queue.
	harness.Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			q, err := groupOn(n, "g1").State().Reader().GetQueue("jobs")
			if err != nil {
				return fmt.Errorf("%s: %w", n.ID, err)
			}
			if q.Stats.Ready != 1 || q.Stats.InFlight != 0 {
				return fmt.Errorf("%s: jobs %+v, want 1 ready", n.ID, q.Stats)
			}
			if err := n.State().Reader().HasQueue("jobs"); err == nil {
				return fmt.Errorf("%s: the legacy group has g1's queue", n.ID)
			}
		}
		return nil
	})
	// Its log runs at the cluster's version, raised as the legacy group's.
	if v := g1.State().Reader().ClusterVersion(); v != leader.State().Reader().ClusterVersion() {
		t.Fatalf("g1 at cluster version %d, the legacy group at %d", v, leader.State().Reader().ClusterVersion())
	}
	// Every node finds g1's leader in gossip.
	harness.Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			ms := n.Host.Broker().Node().Membership()
			if id, addr, ok := ms.GroupLeader("g1"); !ok || id != leader.ID || addr != leader.Addrs.GRPC {
				return fmt.Errorf("%s: g1's leader in gossip %q %q %v, want %s", n.ID, id, addr, ok, leader.ID)
			}
		}
		return nil
	})

	phase("message path, gossip")
	// The leader's host stops: g1 elects another leader among the two
	// left (the legacy group and meta keep their quorum too).
	dead := leader
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer closeCancel()
	if err := dead.Host.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	var next *testcluster.Node
	harness.Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			if n != dead && groupOn(n, "g1").Runtime().Group().LeaderReady() {
				next = n
				return nil
			}
		}
		return errors.New("g1 has no new leader")
	})
	phase("failover")
	// A restart re-opens g1 from DATA/groups/g1, with its state.
	back := c.Restart(dead)
	harness.Eventually(t, 20*time.Second, func() error {
		b := groupOn(back, "g1")
		if b == nil {
			return errors.New("g1 not re-opened")
		}
		if !b.Runtime().Group().HasState() {
			return errors.New("g1 re-opened without its state")
		}
		if q, err := b.State().Reader().GetQueue("jobs"); err != nil || q.Stats.Ready != 1 {
			return fmt.Errorf("jobs on the restarted node: %v %v", q, err)
		}
		return nil
	})
	waitGroup(t, c, "g1", all...)

	phase("restart")
	// The replicas setting drops to one: the pool shrinks g1's record to
	// [n1] (the first by id), the leader hands over to n1 if it must and
	// n1 removes the others one at a time; each closes g1 and deletes its
	// state.
	one, three, threeGroups := uint32(1), uint32(3), uint32(3)
	setSettings(t, c, metagroup.SettingsChange{Replicas: &one})
	waitRecord(t, c, "g1", "n1")
	waitGroup(t, c, "g1", "n1")
	for _, n := range c.Nodes[1:] {
		harness.Eventually(t, 10*time.Second, harness.Holds(n.ID+"'s g1 state deleted", func() bool {
			_, err := os.Stat(filepath.Join(n.DataDir, groups.Dir, "g1"))
			return errors.Is(err, os.ErrNotExist)
		}))
	}
	phase("shrunk")

	// A third group, on one node: the others never open it.
	setSettings(t, c, metagroup.SettingsChange{Groups: &threeGroups})
	g2 := waitRecord(t, c, "g2")
	waitGroup(t, c, "g2", g2...)
	for _, n := range c.Nodes {
		if slices.Contains(g2, n.ID) {
			continue
		}
		if _, err := os.Stat(filepath.Join(n.DataDir, groups.Dir, "g2")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("g2's dir on %s, which its record does not name: %v", n.ID, err)
		}
	}
	phase("g2")

	// Back to three replicas: the nodes dropped open g1 empty (no
	// founders: the record changed), the leader adds each as a nonvoter
	// and promotes it once caught up.
	setSettings(t, c, metagroup.SettingsChange{Replicas: &three})
	waitRecord(t, c, "g1", all...)
	waitRecord(t, c, "g2", all...)
	waitGroup(t, c, "g1", all...)
	waitGroup(t, c, "g2", all...)
	harness.Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			if q, err := groupOn(n, "g1").State().Reader().GetQueue("jobs"); err != nil || q.Stats.Ready != 1 {
				return fmt.Errorf("jobs on %s: %v %v", n.ID, q, err)
			}
		}
		return nil
	})
	phase("grown")
	if got := c.Nodes[2].Host.Groups().Local(); len(got) != 3 || got[0].GroupID() != broker.GroupID || got[1].GroupID() != "g1" || got[2].GroupID() != "g2" {
		t.Fatalf("Local on %s: %d groups", c.Nodes[2].ID, len(got))
	}
	_ = next
}
