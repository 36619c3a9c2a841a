package metagroup_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func noReplicaCheck(_ string, cfg *host.Config) { cfg.Node.ReplicaCheckInterval = -1 }

// metaServers is node n's view of meta's latest configuration: voters and
// nonvoters by id.
func metaServers(t *testing.T, n *testcluster.Node) (voters, nonvoters []string) {
	t.Helper()
	servers, err := raftgroup.LatestServers(n.Host.Meta().Raft().Raft())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		} else {
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	slices.Sort(voters)
	slices.Sort(nonvoters)
	return voters, nonvoters
}

// TestMetaGroupTakesOverClusterWideState: a new three-node cluster
// raises its data log to the handover, whose founders bootstrap the meta
// group (three voters, one leader) and whose leader seeds it. From then
// on an identity, a grant and the settings written through any node are
// meta's (every node's meta replica holds them, the data log's frozen
// copy does not), the data leader follows the settings into its own log,
// queues are placed on the data group and their placement dropped with
// them, and meta keeps serving when its leader's node is stopped.
func TestMetaGroupTakesOverClusterWideState(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Adjust: noReplicaCheck})
	c.WaitClusterVersion(fsm.MaxLogVersion)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	for _, n := range c.Nodes {
		if v, nv := metaServers(t, n); !slices.Equal(v, []string{"n1", "n2", "n3"}) || len(nv) != 0 {
			t.Fatalf("%s sees meta voters %v, nonvoters %v", n.ID, v, nv)
		}
		founders := n.State().Reader().MetaFounders()
		if len(founders) != 3 {
			t.Fatalf("%s: the handover names founders %v", n.ID, founders)
		}
	}

	// Writes through three different nodes: a follower's are forwarded to
	// meta's leader, wherever it is.
	if _, err := raftqv1.NewAuthClient(c.Nodes[1].Conn).CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "alice-1", Identity: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := raftqv1.NewAuthClient(c.Nodes[2].Conn).Grant(ctx, &raftqv1.GrantRequest{Identity: "alice", Pattern: "jobs.*", Allow: []string{"produce"}}); err != nil {
		t.Fatal(err)
	}
	maxQueues := int64(77)
	set, err := c.Nodes[0].Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueues: &maxQueues})
	if err != nil || set.GetSettings().GetMaxQueues() != 77 {
		t.Fatalf("SetClusterSettings: %v, %v", set, err)
	}
	if _, err := c.Nodes[1].Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs.a"}); err != nil {
		t.Fatal(err)
	}

	harness.Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			m := n.Host.Meta().FSM()
			a := m.Auth()
			if !slices.ContainsFunc(a.Identities(), func(i fsm.IdentityInfo) bool { return i.Name == "alice" && len(i.Tokens) == 1 }) {
				return fmt.Errorf("%s: meta holds no token for alice", n.ID)
			}
			if !a.Allowed("alice", fsm.PermProduce, "jobs.a") || a.Allowed("alice", fsm.PermConsume, "jobs.a") {
				return fmt.Errorf("%s: alice's grant is not meta's", n.ID)
			}
			if m.Settings().MaxQueues != 77 {
				return fmt.Errorf("%s: meta max_queues %d", n.ID, m.Settings().MaxQueues)
			}
			if _, held := n.State().Reader().Held(); held.MaxQueues != 77 {
				return fmt.Errorf("%s: the data log's max_queues is %d, not meta's", n.ID, held.MaxQueues)
			}
			for _, q := range []string{"jobs.a", "jobs.a.dlq"} {
				if p, ok, _ := m.Lookup(q); !ok || p.Group != meta.LegacyGroupID {
					return fmt.Errorf("%s: %s placed %+v, %v", n.ID, q, p, ok)
				}
			}
			// The data log's copy is frozen at the handover.
			if !n.State().Reader().Auth().Empty() {
				return fmt.Errorf("%s: an identity write reached the data log", n.ID)
			}
			st, err := n.Admin.Status(ctx, &raftqv1.StatusRequest{})
			if err != nil {
				return err
			}
			if st.GetSettings().GetMaxQueues() != 77 {
				return fmt.Errorf("%s: Status says max_queues %d", n.ID, st.GetSettings().GetMaxQueues())
			}
		}
		return nil
	})

	list, err := raftqv1.NewAuthClient(c.Nodes[0].Conn).ListAuth(ctx, &raftqv1.ListAuthRequest{})
	if err != nil || len(list.GetIdentities()) != 1 || list.GetIdentities()[0].GetName() != "alice" {
		t.Fatalf("ListAuth: %v, %v", list, err)
	}
	// The data log refuses identity writes now, whoever proposes them.
	if err := c.Leader().Host.Broker().Auth().RevokeToken(ctx, "alice-1"); !errors.Is(err, fsm.ErrMoved) {
		t.Fatalf("a revoke proposed into the data log: %v, want ErrMoved", err)
	}

	if _, err := c.Nodes[0].Broker.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "jobs.a"}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, func() error {
		for _, n := range c.Nodes {
			if p, ok, _ := n.Host.Meta().FSM().Lookup("jobs.a"); ok {
				return fmt.Errorf("%s: deleted queue still placed %+v", n.ID, p)
			}
		}
		return nil
	})

	// Meta's leadership moves to a node named, asked through any node
	// (TransferLeadership with group "meta").
	var to *testcluster.Node
	for _, n := range c.Nodes {
		if !n.Host.Meta().Raft().IsLeader() {
			to = n
		}
	}
	tr, err := c.Nodes[0].Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{Group: meta.MetaGroupID, ToId: to.ID})
	if err != nil || tr.GetNewLeaderId() != to.ID {
		t.Fatalf("meta transfer to %s: %v, %v", to.ID, tr, err)
	}
	harness.Eventually(t, 10*time.Second, func() error {
		if !to.Host.Meta().Raft().LeaderReady() {
			return fmt.Errorf("%s does not lead meta yet", to.ID)
		}
		return nil
	})
	if _, err := c.Nodes[0].Admin.TransferLeadership(ctx, &raftqv1.TransferLeadershipRequest{Group: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a transfer naming no group of ours: %v, want NOT_FOUND", err)
	}

	// Meta's leader's node stops; the two others elect a new meta leader
	// and keep taking identity writes.
	var ml *testcluster.Node
	harness.Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Nodes {
			if n.Host.Meta().Raft().LeaderReady() {
				ml = n
				return nil
			}
		}
		return errors.New("no meta leader")
	})
	if err := ml.Host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var other *testcluster.Node
	for _, n := range c.Nodes {
		if n != ml {
			other = n
		}
	}
	harness.Eventually(t, 30*time.Second, func() error {
		_, err := raftqv1.NewAuthClient(other.Conn).CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "bob-1", Identity: "bob"})
		return err
	})
	r := c.Restart(ml)
	harness.Eventually(t, 30*time.Second, func() error {
		if !slices.ContainsFunc(r.Host.Meta().FSM().Auth().Identities(), func(i fsm.IdentityInfo) bool { return i.Name == "bob" }) {
			return errors.New("the restarted node's meta replica has not caught up")
		}
		return nil
	})
	c.WaitStable(30 * time.Second)
}

// TestSingleNodeHandsOver: one node with no flags (the quick start's)
// bootstraps meta alone at once and takes identity writes there.
func TestSingleNodeHandsOver(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 1, Adjust: noReplicaCheck})
	c.WaitClusterVersion(fsm.MaxLogVersion)
	n := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := raftqv1.NewAuthClient(n.Conn).CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := metaServers(t, n); !slices.Equal(v, []string{"n1"}) {
		t.Fatalf("meta voters %v", v)
	}
	if len(n.Host.Meta().FSM().Auth().Identities()) != 1 || !n.State().Reader().Auth().Empty() {
		t.Fatal("the token is not meta's alone")
	}
}

// TestMetaServersFollowTheDataGroup: with four nodes meta has three
// voters (the automatic count below five) and the fourth node as a
// nonvoter, every node holding a seeded replica; when a meta voter's
// node is stopped and removed from the cluster, meta removes it and
// promotes the nonvoter, so it keeps three voters.
func TestMetaServersFollowTheDataGroup(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 4, Expect: 3, Adjust: noReplicaCheck})
	c.WaitClusterVersion(fsm.MaxLogVersion)
	var voters, nonvoters []string
	harness.Eventually(t, 30*time.Second, func() error {
		for _, n := range c.Nodes {
			voters, nonvoters = metaServers(t, n)
			if len(voters) != 3 || len(nonvoters) != 1 {
				return fmt.Errorf("%s sees meta voters %v, nonvoters %v", n.ID, voters, nonvoters)
			}
		}
		return nil
	})
	// A meta voter that does not lead the data group (RemoveNode refuses
	// the leader).
	l := c.Leader()
	var gone *testcluster.Node
	for _, n := range c.Nodes {
		if n != l && slices.Contains(voters, n.ID) {
			gone = n
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gone.Conn.Close()
	if err := gone.Host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admin.RemoveNode(ctx, &raftqv1.RemoveNodeRequest{Id: gone.ID, Force: true}); err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(slices.Concat(voters, nonvoters), func(id string) bool { return id == gone.ID })
	slices.Sort(want)
	harness.Eventually(t, 30*time.Second, func() error {
		v, nv := metaServers(t, l)
		if !slices.Equal(v, want) || len(nv) != 0 {
			return fmt.Errorf("meta voters %v, nonvoters %v; want voters %v", v, nv, want)
		}
		return nil
	})
	// Meta still takes writes with its new voter set.
	if _, err := raftqv1.NewAuthClient(l.Conn).CreateToken(ctx, &raftqv1.CreateTokenRequest{Name: "after-removal"}); err != nil {
		t.Fatal(err)
	}
	// The stopped node is out of the kit's cluster for its cleanup.
	c.Nodes = slices.DeleteFunc(c.Nodes, func(n *testcluster.Node) bool { return n == gone })
}
