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

// TestPoolAndPlaceQueue: on a three-node cluster the settings groups and
// replicas are refused out of range (INVALID_ARGUMENT, nothing changed);
// `cluster set replicas 1` then `cluster set groups 3` make meta's leader
// register g1 and g2 beside the legacy group, one replica each on the
// nodes with the fewest; `cluster set replicas 3` grows both to three
// distinct replicas (a new epoch each). PlaceQueue, at meta's leader
// only, puts a new queue on the least loaded group (ties by id), a queue
// naming a placed DLQ on the DLQ's group, an unplaced DLQ with its queue,
// answers a retry as the first, and refuses a group that would split a
// queue from its DLQ (FAILED_PRECONDITION's ErrConflict) or does not
// exist (ErrNotFound).
func TestPoolAndPlaceQueue(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Adjust: noReplicaCheck})
	c.WaitClusterVersion(fsm.MaxLogVersion)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	u32 := func(v uint32) *uint32 { return &v }
	set := func(n *testcluster.Node, req *raftqv1.SetClusterSettingsRequest) (*raftqv1.ClusterSettings, error) {
		var out *raftqv1.ClusterSettings
		var err error
		harness.Eventually(t, 20*time.Second, func() error {
			var r *raftqv1.SetClusterSettingsResponse
			r, err = n.Admin.SetClusterSettings(ctx, req)
			out = r.GetSettings()
			if status.Code(err) == codes.Unavailable {
				return err // meta still seeding
			}
			return nil
		})
		return out, err
	}
	for _, bad := range []*raftqv1.SetClusterSettingsRequest{
		{Groups: u32(0)}, {Groups: u32(257)}, {Replicas: u32(0)}, {Replicas: u32(2)}, {Replicas: u32(9)},
		{Groups: u32(3), Replicas: u32(4)},
	} {
		if _, err := set(c.Nodes[1], bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("SetClusterSettings %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	for _, n := range c.Nodes {
		if s := n.Host.Meta().FSM().Settings(); s.Groups != 0 || s.Replicas != 0 {
			t.Fatalf("%s: a refused setting changed meta's settings: %+v", n.ID, s)
		}
		if gs, _ := n.Host.Meta().FSM().Groups(); len(gs) != 1 {
			t.Fatalf("%s: groups %v by default, want the legacy group alone", n.ID, gs)
		}
	}

	if s, err := set(c.Nodes[2], &raftqv1.SetClusterSettingsRequest{Replicas: u32(1)}); err != nil || s.GetReplicas() != 1 || s.GetGroups() != 1 {
		t.Fatalf("replicas 1: %v, %v", s, err)
	}
	if s, err := set(c.Nodes[0], &raftqv1.SetClusterSettingsRequest{Groups: u32(3)}); err != nil || s.GetGroups() != 3 {
		t.Fatalf("groups 3: %v, %v", s, err)
	}
	type rec struct {
		reps  []string
		epoch uint64
	}
	waitGroups := func(want map[string]rec) {
		t.Helper()
		harness.Eventually(t, 20*time.Second, func() error {
			for _, n := range c.Nodes {
				gs, legacy := n.Host.Meta().FSM().Groups()
				got := map[string]rec{}
				for _, g := range gs {
					if g.ID != legacy {
						got[g.ID] = rec{g.Replicas, g.Epoch}
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Errorf("%s: groups %v, want %v", n.ID, got, want)
				}
			}
			return nil
		})
	}
	waitGroups(map[string]rec{"g1": {[]string{"n1"}, 1}, "g2": {[]string{"n2"}, 1}})
	if _, err := set(c.Nodes[1], &raftqv1.SetClusterSettingsRequest{Replicas: u32(3)}); err != nil {
		t.Fatal(err)
	}
	all := []string{"n1", "n2", "n3"}
	waitGroups(map[string]rec{"g1": {all, 2}, "g2": {all, 2}})
	st, err := c.Nodes[2].Admin.Status(ctx, &raftqv1.StatusRequest{})
	if err != nil || st.GetSettings().GetGroups() != 3 || st.GetSettings().GetReplicas() != 3 {
		t.Fatalf("Status settings %v, %v", st.GetSettings(), err)
	}

	// The legacy group holds two queues (jobs.a and its DLQ), g1 and g2
	// none.
	if _, err := c.Nodes[1].Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs.a"}); err != nil {
		t.Fatal(err)
	}
	var leader, follower *testcluster.Node
	harness.Eventually(t, 20*time.Second, func() error {
		leader, follower = nil, nil
		for _, n := range c.Nodes {
			if n.Host.Meta().Raft().LeaderReady() {
				leader = n
			} else {
				follower = n
			}
		}
		if leader == nil {
			return errors.New("no meta leader")
		}
		if _, ok, _ := leader.Host.Meta().FSM().Lookup("jobs.a.dlq"); !ok {
			return errors.New("jobs.a.dlq not placed yet")
		}
		return nil
	})
	m := leader.Host.Meta()
	if _, _, err := follower.Host.Meta().PlaceQueue(ctx, "x", "", ""); !errors.Is(err, raftgroup.ErrNotLeader) {
		t.Fatalf("PlaceQueue at a follower: %v, want ErrNotLeader", err)
	}
	place := func(queue, dlq, group, want string, wantErr error) {
		t.Helper()
		got, version, err := m.PlaceQueue(ctx, queue, dlq, group)
		if got != want || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
			t.Fatalf("PlaceQueue(%q, dlq %q, group %q) = %q, %v; want %q, %v", queue, dlq, group, got, err, want, wantErr)
		}
		if err != nil {
			return
		}
		p, ok, v := m.FSM().Lookup(queue)
		if !ok || p.Group != want || version == 0 || version > v || version < p.Index {
			t.Fatalf("%s: placed %+v, %v at version %d; PlaceQueue answered version %d", queue, p, ok, v, version)
		}
	}
	place("x", "", "", "g1", nil)      // data 2, g1 0, g2 0: ties by id
	place("y", "", "", "g2", nil)      // g1 1, g2 0
	place("z", "z.dlq", "", "g1", nil) // g1 1, g2 1: g1, with its new DLQ
	place("w", "x", "", "g1", nil)     // x is a placed DLQ on g1
	place("v", "y", "g2", "g2", nil)   // named, and the DLQ's
	placedU := time.Now()
	place("u", "jobs.a.dlq", "", "data", nil) // the legacy group's DLQ
	place("x", "", "", "g1", nil)             // a retry answers as the first
	place("x", "", "g2", "", meta.ErrConflict)
	place("s", "x", "g2", "", meta.ErrConflict) // would split s from its DLQ
	place("r", "", "g9", "", meta.ErrNotFound)
	if p, ok, _ := m.FSM().Lookup("z.dlq"); !ok || p.Group != "g1" {
		t.Fatalf("z.dlq placed %+v, %v; want with z on g1", p, ok)
	}
	for _, q := range []string{"s", "r"} {
		if p, ok, _ := m.FSM().Lookup(q); ok {
			t.Fatalf("a refused placement of %s committed %+v", q, p)
		}
	}
	if load := m.FSM().Load(); load["g1"] != 4 || load["g2"] != 2 {
		t.Fatalf("load %v", load)
	}

	// u is placed on the legacy group, which does not hold it (nothing
	// creates it here): the rounds that ran since (every commit wakes
	// one) left it for the grace a create needs, and it goes after.
	if _, err := set(c.Nodes[0], &raftqv1.SetClusterSettingsRequest{Replicas: u32(3)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.FSM().Lookup("u"); !ok && time.Since(placedU) < 4*time.Second {
		t.Fatal("a fresh placement on the legacy group was dropped before its queue could be created")
	}
	harness.Eventually(t, 20*time.Second, func() error {
		if p, ok, _ := m.FSM().Lookup("u"); ok {
			return fmt.Errorf("u, never created, still placed %+v", p)
		}
		if _, ok, _ := m.FSM().Lookup("jobs.a"); !ok {
			return errors.New("jobs.a, which the legacy group holds, lost its placement")
		}
		return nil
	})

	// A lower count removes only groups that hold no queue: g3, not g1
	// or g2.
	if _, err := set(c.Nodes[0], &raftqv1.SetClusterSettingsRequest{Groups: u32(4)}); err != nil {
		t.Fatal(err)
	}
	waitGroups(map[string]rec{"g1": {all, 2}, "g2": {all, 2}, "g3": {all, 1}})
	if _, err := set(c.Nodes[0], &raftqv1.SetClusterSettingsRequest{Groups: u32(1)}); err != nil {
		t.Fatal(err)
	}
	waitGroups(map[string]rec{"g1": {all, 2}, "g2": {all, 2}})
}
