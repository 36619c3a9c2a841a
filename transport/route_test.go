package transport_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakePlacements is a meta replica's placement as transport reads it,
// kept to what the real one guarantees: its version only rises, a
// placement once made keeps its group (a retry answers as the first, a
// different group is a conflict), and Await sees every change.
type fakePlacements struct {
	mu         sync.Mutex
	changed    chan struct{}
	version    uint64
	placements map[string]meta.Placement
	groups     map[string]*meta.Group
	members    []meta.Member
}

func newFakePlacements(groups ...string) *fakePlacements {
	f := &fakePlacements{changed: make(chan struct{}), placements: map[string]meta.Placement{}, groups: map[string]*meta.Group{}}
	for _, g := range groups {
		f.groups[g] = &meta.Group{ID: g, Epoch: 1}
	}
	return f
}

// change applies fn under the lock, raises the version to at least v
// (never lowers it) and wakes Await.
func (f *fakePlacements) change(v uint64, fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn != nil {
		fn()
	}
	f.version = max(f.version, v)
	close(f.changed)
	f.changed = make(chan struct{})
}

// place places queue on group as meta would: idempotent, a conflict
// refused, each new placement one version up.
func (f *fakePlacements) place(queue, group string) (uint64, error) {
	f.mu.Lock()
	if p, ok := f.placements[queue]; ok {
		f.mu.Unlock()
		if p.Group != group {
			return 0, status.Errorf(codes.FailedPrecondition, "queue %s is placed on %s", queue, p.Group)
		}
		return p.Index, nil
	}
	if _, ok := f.groups[group]; !ok {
		f.mu.Unlock()
		return 0, status.Errorf(codes.NotFound, "group %s", group)
	}
	v := f.version + 1
	f.mu.Unlock()
	f.change(v, func() { f.placements[queue] = meta.Placement{Queue: queue, Group: group, Index: v} })
	return v, nil
}

func (f *fakePlacements) Lookup(queue string) (meta.Placement, bool, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.placements[queue]
	return p, ok, f.version
}

func (f *fakePlacements) Group(id string) (*meta.Group, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.groups[id]
	if !ok {
		return nil, false
	}
	c := *g
	return &c, true
}

func (f *fakePlacements) Groups() ([]*meta.Group, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*meta.Group
	for _, id := range slices.Sorted(maps.Keys(f.groups)) {
		c := *f.groups[id]
		out = append(out, &c)
	}
	return out, meta.LegacyGroupID
}

func (f *fakePlacements) Members() []meta.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members)
}

func (f *fakePlacements) Await(ctx context.Context, cond func() bool) bool {
	for {
		f.mu.Lock()
		ch := f.changed // taken before the check: no change is missed
		f.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// waitMeta waits until every node's meta group is active: only then is
// placement read.
func waitMeta(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	waitUntil(t, 20*time.Second, "the meta group active on every node", func() error {
		for _, n := range c.Nodes {
			if !n.Host.Meta().Active() {
				return fmt.Errorf("%s: meta not active", n.ID)
			}
		}
		return nil
	})
}

func follower(c *testcluster.Cluster, l *testcluster.Node) *testcluster.Node {
	for _, n := range c.Nodes {
		if n != l {
			return n
		}
	}
	return nil
}

// TestQueueOnAGroupNoOneRuns: a queue placed on a data group that the
// cluster does not run is a clear FAILED_PRECONDITION naming the queue
// and the group, for unary calls and streams, on any node; a queue
// placed nowhere is the legacy group's, as before.
func TestQueueOnAGroupNoOneRuns(t *testing.T) {
	f := newFakePlacements(meta.LegacyGroupID)
	f.change(1, func() { f.placements["lost"] = meta.Placement{Queue: "lost", Group: "ghost", Index: 1} })
	c := startInproc(t, inprocOpts{nodes: 3, adjust: func(_ string, cfg *host.Config) { cfg.API.Placements = f }})
	l := c.WaitStable(20 * time.Second)
	waitMeta(t, c)
	ctx := tctx(t, 30*time.Second)
	if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		_, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "lost", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"ghost"`) || !strings.Contains(err.Error(), `"lost"`) {
			t.Fatalf("%s: Enqueue to a queue on a group no one runs: %v, want FAILED_PRECONDITION naming the queue and the group", n.ID, err)
		}
		err = leaseErr(ctx, n.Broker, &raftqv1.LeaseRequest{Queue: "lost"})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"ghost"`) {
			t.Fatalf("%s: Lease: %v, want FAILED_PRECONDITION naming the group", n.ID, err)
		}
		if _, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}); err != nil {
			t.Fatalf("%s: Enqueue to a queue placed nowhere (the legacy group's): %v", n.ID, err)
		}
	}
}

// TestNotOwnerOnAnOlderPlacement: a call forwarded from a node whose
// placement is newer than the leader's carries its version, and the
// leader, once a moment's wait has not brought its own replica there,
// answers UNAVAILABLE NOT_OWNER with its own placement_version, changing
// nothing; once its replica catches up the same call goes through. A
// client may send the header too.
func TestNotOwnerOnAnOlderPlacement(t *testing.T) {
	fakes := map[string]*fakePlacements{}
	for i := 1; i <= 3; i++ {
		fakes[fmt.Sprintf("n%d", i)] = newFakePlacements(meta.LegacyGroupID)
	}
	c := startInproc(t, inprocOpts{nodes: 3, adjust: func(id string, cfg *host.Config) { cfg.API.Placements = fakes[id] }})
	l := c.WaitStable(20 * time.Second)
	waitMeta(t, c)
	ctx := tctx(t, 30*time.Second)
	if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	f := follower(c, l)
	fakes[l.ID].change(3, nil)
	fakes[f.ID].change(7, nil)
	enqueue := func(ctx context.Context, n *testcluster.Node) error {
		_, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}})
		return err
	}
	checkNotOwner := func(err error, version string) {
		t.Helper()
		ei := errorInfo(err)
		if status.Code(err) != codes.Unavailable || ei == nil || ei.Reason != transport.ReasonNotOwner || ei.Metadata["placement_version"] != version {
			t.Fatalf("got %v (ErrorInfo %v), want UNAVAILABLE NOT_OWNER with placement_version %s", err, ei, version)
		}
	}
	checkNotOwner(enqueue(ctx, f), "3")
	checkNotOwner(enqueue(metadata.AppendToOutgoingContext(ctx, "raftq-placement-version", "4"), l), "3")
	if got := l.State().Reader().ListQueues("jobs")[0].Stats.Ready; got != 0 {
		t.Fatalf("refused calls enqueued %d messages", got)
	}
	// Caught up while the call waits: it goes through.
	errc := make(chan error, 1)
	go func() { errc <- enqueue(ctx, f) }()
	fakes[l.ID].change(7, nil)
	if err := <-errc; err != nil {
		t.Fatalf("with the leader's placement caught up: %v", err)
	}
	if _, err := l.Broker.Enqueue(metadata.AppendToOutgoingContext(ctx, "raftq-placement-version", "x"), &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a malformed placement version: %v, want INVALID_ARGUMENT", err)
	}
}

// TestGroupOnTheOneGroupCluster: on a cluster of the one data group the
// NOT_LEADER of a Lease on a follower keeps leader_id and leader_addr
// and names the group; CreateQueue takes group "" or "data" and every
// QueueInfo names "data"; another group is NOT_FOUND and a malformed one
// INVALID_ARGUMENT, creating nothing.
func TestGroupOnTheOneGroupCluster(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.WaitStable(20 * time.Second)
	waitMeta(t, c)
	f := follower(c, l)
	ctx := tctx(t, 30*time.Second)
	for _, q := range []struct{ name, group string }{{"a", ""}, {"b", "data"}} {
		resp, err := f.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: q.name, Group: q.group})
		if err != nil {
			t.Fatalf("CreateQueue %s in %q: %v", q.name, q.group, err)
		}
		if g := resp.GetQueue().GetGroup(); g != "data" {
			t.Fatalf("CreateQueue %s in %q: QueueInfo.group %q, want data", q.name, q.group, g)
		}
		got, err := f.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: q.name})
		if err != nil || got.GetQueue().GetGroup() != "data" {
			t.Fatalf("GetQueue %s: %v %v, want group data", q.name, got, err)
		}
	}
	list, err := f.Broker.ListQueues(ctx, &raftqv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range list.GetQueues() {
		if q.GetGroup() != "data" {
			t.Fatalf("ListQueues: %s in group %q, want data", q.GetName(), q.GetGroup())
		}
	}
	if _, err := f.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "c", Group: "nope"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("CreateQueue in a group the cluster does not run: %v, want NOT_FOUND naming it", err)
	}
	if _, err := f.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "c", Group: "a/b"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CreateQueue in a malformed group: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "c"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused create created the queue: %v", err)
	}

	err = leaseErr(ctx, f.Broker, &raftqv1.LeaseRequest{Queue: "a"})
	checkRedirect(t, err, transport.ReasonNotLeader, l)
	if g := errorInfo(err).Metadata["group"]; g != "data" {
		t.Fatalf("NOT_LEADER names group %q, want data", g)
	}
}

// TestCreatePlacesAtMetaLeader: with more than one data group in meta's
// pool a CreateQueue through a node that leads neither meta nor the data
// group is placed first, at meta's leader (metagroup's PlaceQueue, one
// hop), then created at the chosen group's leader (one more), and the
// node it came through places the queue in its own replica before it
// answers, so its next call routes there.
func TestCreatePlacesAtMetaLeader(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.WaitStable(20 * time.Second)
	waitMeta(t, c)
	ctx := tctx(t, 40*time.Second)
	two := uint32(2)
	if _, err := l.Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{Groups: &two}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "two data groups in every node's meta replica", func() error {
		for _, n := range c.Nodes {
			if gs, _ := n.Host.Meta().FSM().Groups(); len(gs) != 2 {
				return fmt.Errorf("%s: %d groups", n.ID, len(gs))
			}
		}
		return nil
	})
	var via *testcluster.Node
	metaLeader := l.Host.Meta().Raft().Leadership().LeaderID
	for _, n := range c.Nodes {
		if n != l && n.ID != metaLeader {
			via = n
		}
	}
	if via == nil {
		t.Skip("meta and the data group are led by different nodes, and the third is needed")
	}
	resp, err := via.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs", Group: "data", IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if g := resp.GetQueue().GetGroup(); g != "data" {
		t.Fatalf("QueueInfo.group %q, want data", g)
	}
	if p, ok, _ := via.Host.Meta().FSM().Lookup("jobs"); !ok || p.Group != "data" {
		t.Fatalf("the node the create came through places jobs at %+v (%v), want data", p, ok)
	}
	// A retry answers as the first did.
	again, err := via.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "jobs", Group: "data", IdempotencyKey: "k1"})
	if err != nil || again.GetQueue().GetGroup() != "data" {
		t.Fatalf("the retry: %v %v", again, err)
	}
	if _, err := via.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "jobs", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
}

// TestCallsReachTheirGroupsLeader: two data groups (the legacy one on
// every node, a second on one node: meta's pool with groups 2 and
// replicas 1, opened by the group manager), queues on each, created on
// the group CreateQueueRequest.group names (placed first at meta's
// leader); a call through any node reaches the leader of its queue's
// group, also from the nodes that run no replica of the second (forwarded
// to the leader gossip names), a Lease on such a node is NOT_LEADER
// naming the group and its leader, and one listing through any node
// holds both groups' queues sorted by name, paged across them.
func TestCallsReachTheirGroupsLeader(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l := c.WaitStable(20 * time.Second)
	waitMeta(t, c)
	ctx := tctx(t, 60*time.Second)
	two, one := uint32(2), uint32(1)
	if _, err := l.Admin.SetClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{Groups: &two, Replicas: &one}); err != nil {
		t.Fatal(err)
	}
	var g2 *meta.Group
	waitUntil(t, 30*time.Second, "group g2 on one node, led there, known to every node", func() error {
		for _, n := range c.Nodes {
			gs, _ := n.Host.Meta().FSM().Groups()
			if len(gs) != 2 {
				return fmt.Errorf("%s: %d groups", n.ID, len(gs))
			}
			for _, g := range gs {
				if g.ID != meta.LegacyGroupID {
					g2 = g
				}
			}
		}
		if len(g2.Replicas) != 1 {
			return fmt.Errorf("g2 replicas %v", g2.Replicas)
		}
		home := c.ByID(g2.Replicas[0])
		b, ok := home.Host.Groups().Get(g2.ID)
		if !ok || !b.Runtime().Group().LeaderReady() {
			return fmt.Errorf("g2 not led on %s yet", home.ID)
		}
		for _, n := range c.Nodes {
			if id, _, ok := n.ClusterNode().Membership().GroupLeader(g2.ID); !ok || id != home.ID {
				return fmt.Errorf("%s: gossip names %q as g2's leader", n.ID, id)
			}
		}
		return nil
	})
	home := c.ByID(g2.Replicas[0])
	want := map[string]string{} // queue → group
	for i := 1; i <= 6; i++ {
		name, group := fmt.Sprintf("q%d", i), meta.LegacyGroupID
		if i%2 == 0 {
			group = g2.ID
		}
		resp, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Group: group})
		if err != nil || resp.GetQueue().GetGroup() != group {
			t.Fatalf("CreateQueue %s on %s: %v %v", name, group, resp, err)
		}
		want[name], want[name+".dlq"] = group, group
	}
	// Placed already: again on its group is its group's answer, on
	// another a conflict.
	if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q2", Group: g2.ID}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("CreateQueue of q2 again: %v, want ALREADY_EXISTS (from %s)", err, g2.ID)
	}
	if _, err := l.Broker.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "q2", Group: meta.LegacyGroupID}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("CreateQueue of q2 on another group: %v, want FAILED_PRECONDITION", err)
	}
	for _, n := range c.Nodes {
		for _, q := range []string{"q1", "q2"} {
			if _, err := n.Broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: q, Messages: []*raftqv1.EnqueueMessage{{Payload: []byte(n.ID)}}}); err != nil {
				t.Fatalf("%s: Enqueue %s: %v", n.ID, q, err)
			}
			got, err := n.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: q})
			if err != nil || got.GetQueue().GetGroup() != want[q] {
				t.Fatalf("%s: GetQueue %s: %v %v, want group %s", n.ID, q, got, err, want[q])
			}
		}
	}
	b, _ := home.Host.Groups().Get(g2.ID)
	if got := b.State().Reader().ListQueues("q2")[0].Stats.Ready; got != 3 {
		t.Fatalf("%s holds %d of q2's messages, want 3", g2.ID, got)
	}
	if got := l.State().Reader().ListQueues("q1")[0].Stats.Ready; got != 3 {
		t.Fatalf("the legacy group holds %d of q1's messages, want 3", got)
	}
	if err := b.State().Reader().HasQueue("q1"); err == nil {
		t.Fatalf("q1 reached %s", g2.ID)
	}
	names := slices.Sorted(maps.Keys(want))
	for _, n := range c.Nodes {
		if n != home {
			err := leaseErr(ctx, n.Broker, &raftqv1.LeaseRequest{Queue: "q2"})
			checkRedirect(t, err, transport.ReasonNotLeader, home)
			if g := errorInfo(err).Metadata["group"]; g != g2.ID {
				t.Fatalf("%s: NOT_LEADER names group %q, want %s", n.ID, g, g2.ID)
			}
		}
		// One listing, sorted by name across the groups, paged.
		for _, size := range []int32{0, 1, 3, 5, 12, 13} {
			var got []string
			token := ""
			for pages := 0; ; pages++ {
				if pages > len(names)+1 {
					t.Fatalf("%s: page_size %d: no end of pages", n.ID, size)
				}
				resp, err := n.Broker.ListQueues(ctx, &raftqv1.ListQueuesRequest{Prefix: "q", PageSize: size, PageToken: token})
				if err != nil {
					t.Fatalf("%s: page_size %d: %v", n.ID, size, err)
				}
				if size > 0 && len(resp.GetQueues()) > int(size) {
					t.Fatalf("%s: page_size %d: a page of %d", n.ID, size, len(resp.GetQueues()))
				}
				for _, q := range resp.GetQueues() {
					if q.GetGroup() != want[q.GetName()] {
						t.Fatalf("%s: %s listed in group %q, want %s", n.ID, q.GetName(), q.GetGroup(), want[q.GetName()])
					}
					got = append(got, q.GetName())
				}
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
			}
			if !slices.Equal(got, names) {
				t.Fatalf("%s: page_size %d: listed %v, want %v", n.ID, size, got, names)
			}
		}
	}
	if _, err := l.Broker.ListQueues(ctx, &raftqv1.ListQueuesRequest{PageSize: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a negative page_size: %v", err)
	}
}
