package cluster

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/test/harness"
)

// refusedIDs returns the ids n's Status lists as refused, and their
// reasons.
func refusedIDs(n *testNode) (ids []string, reasons map[string]string) {
	reasons = map[string]string{}
	for _, r := range n.Status().Refused {
		ids = append(ids, r.ID)
		reasons[r.ID] = r.Reason
	}
	return ids, reasons
}

// servers returns the ids of every server in n's configuration, sorted.
func servers(n *testNode) []string {
	ss, _ := raftgroup.LatestServers(n.Raft())
	var ids []string
	for _, s := range ss {
		ids = append(ids, string(s.ID))
	}
	slices.Sort(ids)
	return ids
}

// waitClusterID waits until n has a cluster id and returns it.
func waitClusterID(t *testing.T, n *testNode) string {
	t.Helper()
	harness.Eventually(t, 15*time.Second, harness.Holds(n.ID()+" to have a cluster id", func() bool { return n.ClusterID() != "" }))
	return n.ClusterID()
}

// waitDecided waits until leader has either added each of ids to its
// configuration or listed it as refused, then for two more reconciler
// passes (a pass that had not yet seen a member cannot have added it).
func waitDecided(t *testing.T, leader *testNode, ids ...string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, harness.Holds("the leader to add or refuse "+strings.Join(ids, ", "), func() bool {
		inConf, refused := servers(leader), map[string]bool{}
		ref, _ := refusedIDs(leader)
		for _, id := range ref {
			refused[id] = true
		}
		for _, id := range ids {
			if !refused[id] && !slices.Contains(inConf, id) {
				return false
			}
		}
		return true
	}))
	from := leader.rec.passes.Load()
	harness.Eventually(t, 10*time.Second, harness.Holds("two reconciler passes", func() bool { return leader.rec.passes.Load() >= from+2 }))
}

// TestLoneNodeRefusesAnotherBootstrap is the accidental merge of issue
// 20: a single node started with the defaults (bootstrap-expect 1, no
// --join) keeps running, and two nodes started to found a cluster of
// their own (bootstrap-expect 3; their third could not start) reach its
// gossip port through their --join. They must not be admitted: before
// cluster ids, the lone node added them as nonvoters, promoted them, and
// lost its quorum with them.
func TestLoneNodeRefusesAnotherBootstrap(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	lone := startNode(t, testConfig(t, "lone", dir, 1))
	defer shutdown(t, lone)
	if _, err := lone.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	cid := waitClusterID(t, lone)
	// A founder records its id once it leads (its identity loop, just
	// after the term is established).
	harness.Eventually(t, 15*time.Second, harness.Holds("the lone leader's data dir to record "+cid, func() bool {
		got, err := PersistedClusterID(lone.cfg.DataDir)
		return err == nil && got == cid
	}))

	var founders []*testNode
	for _, id := range []string{"n2", "n3"} {
		cfg := testConfig(t, id, dir, 3)
		cfg.Join = []string{lone.GossipAddr()}
		n := startNode(t, cfg)
		defer shutdown(t, n)
		founders = append(founders, n)
	}
	waitDecided(t, lone, "n2", "n3")
	if got := servers(lone); !slices.Equal(got, []string{"lone"}) {
		t.Fatalf("lone node's configuration is %v, want only itself", got)
	}
	ids, reasons := refusedIDs(lone)
	if !slices.Equal(ids, []string{"n2", "n3"}) {
		t.Fatalf("refused %v, want n2 and n3", ids)
	}
	for id, why := range reasons {
		if !strings.Contains(why, "presents no cluster id") {
			t.Errorf("%s refused because %q, want it to say it presents no cluster id", id, why)
		}
	}
	for _, n := range founders {
		if n.Raft().LastIndex() != 0 || n.ClusterID() != "" {
			t.Errorf("%s has log index %d and cluster id %q; want no state and no id", n.ID(), n.Raft().LastIndex(), n.ClusterID())
		}
	}
	if _, err := lone.Apply(ctxTimeout(t, 5*time.Second), []byte("still alone")); err != nil {
		t.Fatalf("the lone node no longer commits alone: %v", err)
	}
	for _, n := range founders {
		shutdown(t, n)
	}
	shutdown(t, lone)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}

// TestClustersNeverAdmitEachOther: two running clusters whose gossip
// meets (an operator's --join typo) each refuse the other's members, and
// a new node that sees both joins neither.
func TestClustersNeverAdmitEachOther(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, testConfig(t, "a1", dir, 1))
	defer shutdown(t, a)
	var b []*testNode
	for _, id := range []string{"b1", "b2"} {
		cfg := testConfig(t, id, dir, 2)
		if len(b) > 0 {
			cfg.Join = []string{b[0].GossipAddr()}
		}
		n := startNode(t, cfg)
		defer shutdown(t, n)
		b = append(b, n)
	}
	if _, err := a.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	aid := waitClusterID(t, a)
	bl, err := b[0].WaitLeader(ctxTimeout(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bLeader := b[0]
	if bl.ID == "b2" {
		bLeader = b[1]
	}
	bid := waitClusterID(t, bLeader)
	harness.Eventually(t, 15*time.Second, harness.Holds("b's nodes to agree on b's cluster id", func() bool {
		return b[0].ClusterID() == bid && b[1].ClusterID() == bid
	}))
	if aid == bid {
		t.Fatalf("both clusters have id %s", aid)
	}

	if _, err := a.ms.Join([]string{b[0].GossipAddr()}); err != nil {
		t.Fatalf("joining the gossip of the two clusters: %v", err)
	}
	waitDecided(t, a, "b1", "b2")
	waitDecided(t, bLeader, "a1")
	if got := servers(a); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("a's configuration is %v, want [a1]", got)
	}
	if got := servers(bLeader); !slices.Equal(got, []string{"b1", "b2"}) {
		t.Errorf("b's configuration is %v, want [b1 b2]", got)
	}
	_, reasons := refusedIDs(bLeader)
	if !strings.Contains(reasons["a1"], "belongs to another cluster ("+aid) {
		t.Errorf("b refused a1 because %q, want it to name a's cluster", reasons["a1"])
	}

	// A new node that sees both clusters joins neither.
	jcfg := testConfig(t, "j", dir, 1)
	jcfg.Join = []string{a.GossipAddr()}
	j := startNode(t, jcfg)
	defer shutdown(t, j)
	waitDecided(t, a, "j")
	waitDecided(t, bLeader, "j")
	if slices.Contains(servers(a), "j") || slices.Contains(servers(bLeader), "j") {
		t.Fatalf("j was added: a has %v, b has %v", servers(a), servers(bLeader))
	}
	if j.ClusterID() != "" || j.Raft().LastIndex() != 0 {
		t.Fatalf("j has cluster id %q and log index %d; want neither", j.ClusterID(), j.Raft().LastIndex())
	}
}

// TestJoinSingleNodeOnPurpose: growing a single node into a cluster: a
// node started with --join naming it (and the default bootstrap-expect 1)
// presents its cluster id, is added, promoted, and records the id; so
// does one started with the cluster's own bootstrap-expect.
func TestJoinSingleNodeOnPurpose(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, testConfig(t, "a", dir, 1))
	defer shutdown(t, a)
	if _, err := a.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	cid := waitClusterID(t, a)
	for _, id := range []string{"b", "c"} {
		cfg := testConfig(t, id, dir, 1)
		cfg.Join = []string{a.GossipAddr()}
		n := startNode(t, cfg)
		defer shutdown(t, n)
		harness.Eventually(t, 20*time.Second, harness.Holds(id+" promoted to voter", func() bool { return suffrage(a, id) == "Voter" }))
		if got, err := PersistedClusterID(cfg.DataDir); err != nil || got != cid {
			t.Fatalf("%s's data dir records cluster id %q (%v), want %q", id, got, err, cid)
		}
	}
	if ids, _ := refusedIDs(a); len(ids) > 0 {
		t.Fatalf("refused %v", ids)
	}
}

// TestRepairedNodeKeepsClusterID: a node whose Raft state is set aside
// (replica repair) keeps its cluster id file: it never bootstraps a
// cluster of its own, and the leader admits it again.
func TestRepairedNodeKeepsClusterID(t *testing.T) {
	dir := t.TempDir()
	a := startNode(t, testConfig(t, "a", dir, 1))
	defer shutdown(t, a)
	if _, err := a.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	cid := waitClusterID(t, a)
	bcfg := testConfig(t, "b", dir, 1)
	bcfg.Join = []string{a.GossipAddr()}
	b := startNode(t, bcfg)
	harness.Eventually(t, 20*time.Second, harness.Holds("b promoted", func() bool { return suffrage(a, "b") == "Voter" }))
	// b records the id it learned from gossip on its own time: a loaded
	// fresh-clone run promoted it before it had, and the repair below
	// is of a node that knew its cluster.
	harness.Eventually(t, 20*time.Second, harness.Holds("b to know the cluster id", func() bool { return b.ClusterID() == cid }))
	// Removed first (as a repair does): with b stopped, a alone would be
	// no quorum of two voters.
	if err := a.RemoveNode(ctxTimeout(t, 10*time.Second), "b", true); err != nil {
		t.Fatal(err)
	}
	shutdown(t, b)
	if err := raftgroup.RequestWipe(bcfg.DataDir, "test"); err != nil {
		t.Fatal(err)
	}
	// Started alone (no seed answers): it must not found a cluster.
	lone := bcfg
	lone.Join = []string{"127.0.0.1:1"}
	b = startNode(t, lone)
	defer shutdown(t, b)
	if b.ClusterID() != cid {
		t.Fatalf("repaired b has cluster id %q, want %q", b.ClusterID(), cid)
	}
	if _, err := os.Stat(filepath.Join(bcfg.DataDir, clusterIDFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ms.Join([]string{a.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, harness.Holds("b back as a voter", func() bool { return suffrage(a, "b") == "Voter" }))
	if b.boot.done.Load() != 0 {
		t.Fatal("the repaired node bootstrapped")
	}
}

func TestAdmission(t *testing.T) {
	const x, y = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	for _, tc := range []struct {
		name   string
		ours   string
		m      membership.Meta
		inConf bool
		want   string // "" admit, else a part of the reason
	}{
		{"same id", x, membership.Meta{ClusterID: x, IDs: true}, false, ""},
		{"another cluster", x, membership.Meta{ClusterID: y, IDs: true}, false, "another cluster"},
		{"another cluster, same node id in conf", x, membership.Meta{ClusterID: y, IDs: true}, true, "another cluster"},
		{"no id, new build", x, membership.Meta{IDs: true, Expect: 3}, false, "presents no cluster id"},
		{"no id, old build", x, membership.Meta{}, false, "older build"},
		{"no id, old build, in conf at a new address", x, membership.Meta{}, true, ""},
		{"cluster without id yet, old build", "", membership.Meta{}, false, ""},
		{"cluster without id yet, new build", "", membership.Meta{IDs: true}, false, ""},
		{"cluster without id yet, member with one", "", membership.Meta{ClusterID: y, IDs: true}, false, "has none yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := admission(tc.ours, tc.m, tc.inConf)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("admission = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestJoinable(t *testing.T) {
	const x, y = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	rec := func(id, cid string, expect int, state bool) membership.Record {
		return membership.Record{MetaOK: true, State: membership.Alive, Meta: membership.Meta{ID: id, ClusterID: cid, Expect: expect, State: state, IDs: true}}
	}
	for _, tc := range []struct {
		name    string
		expect  int
		members []membership.Record
		want    string
		why     string
	}{
		{"nobody", 3, nil, "", ""},
		{"expect 1 joins", 1, []membership.Record{rec("a", x, 3, true)}, x, ""},
		{"same expect joins", 3, []membership.Record{rec("a", x, 3, true)}, x, ""},
		{"other expect does not", 3, []membership.Record{rec("a", x, 1, true)}, "", "bootstrap-expect [1]"},
		{"two clusters", 1, []membership.Record{rec("a", x, 1, true), rec("b", y, 1, true)}, "", "2 clusters"},
		{"stateless members do not count", 1, []membership.Record{rec("a", x, 1, false)}, "", ""},
		{"cluster without id", 1, []membership.Record{rec("a", "", 1, true)}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := map[string]membership.Record{}
			for _, m := range tc.members {
				ms[m.Meta.ID] = m
			}
			got, why := joinable(tc.expect, "self", ms)
			if got != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Fatalf("joinable = %q, %q; want %q, %q", got, why, tc.want, tc.why)
			}
		})
	}
}

// A founder's own cluster id is provisional: each founder makes one and
// the first leader's wins, so it is recorded only once this node leads
// (Node.syncIdentity) or when the leader's replaces it. A chaos run (seed
// 793107140889) stopped a founder before it heard of the leader and
// truncated its log: it had recorded its own id at bootstrap, asked
// under it to be added back once repaired, and was refused for good as
// another cluster's.
func TestFounderIDIsProvisional(t *testing.T) {
	for _, tc := range []struct {
		name string
		then func(i *identity) error
		want func(made string) string
	}{
		{"nothing heard", func(i *identity) error { return i.persist() }, func(string) string { return "" }},
		{"the leader's taken", func(i *identity) error { return i.set(strings.Repeat("ab", 16), true, "taken from the leader") },
			func(string) string { return strings.Repeat("ab", 16) }},
		{"this node leads", func(i *identity) error { return i.set(i.get(), true, "established by this leader") },
			func(made string) string { return made }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			i, err := loadIdentity(dir, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			made := newClusterID()
			i.found(made)
			if i.get() != made || !i.isProvisional() || i.recorded() {
				t.Fatalf("after found: id %q provisional %v recorded %v", i.get(), i.isProvisional(), i.recorded())
			}
			if err := tc.then(i); err != nil {
				t.Fatal(err)
			}
			got, err := PersistedClusterID(dir)
			if want := tc.want(made); err != nil || got != want {
				t.Fatalf("data dir records %q (%v), want %q", got, err, want)
			}
			if want := tc.want(made); want != "" && (i.isProvisional() || !i.recorded() || i.get() != want) {
				t.Fatalf("after recording: id %q provisional %v recorded %v", i.get(), i.isProvisional(), i.recorded())
			}
		})
	}
}
