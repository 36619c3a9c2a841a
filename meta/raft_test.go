package meta

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	metav1 "github.com/raftq/raftq/proto/raftq/meta/v1"
)

// TestUnderRaft runs the FSM in a real hashicorp/raft group of three
// (in-memory transport and stores), then adds a fourth voter after the
// leader has snapshotted and compacted its log, so the new voter is
// brought up by InstallSnapshot (Persist on the leader, Restore on it):
// every replica ends at the same index with the same digest.
func TestUnderRaft(t *testing.T) {
	type member struct {
		r   *raft.Raft
		f   *FSM
		trn *raft.InmemTransport
	}
	var members []*member
	start := func(id string) *member {
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(id)
		conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
		conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
		conf.TrailingLogs, conf.SnapshotThreshold, conf.SnapshotInterval = 1, 1<<30, time.Hour
		conf.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
		_, trn := raft.NewInmemTransport(raft.ServerAddress(id))
		for _, o := range members {
			trn.Connect(o.trn.LocalAddr(), o.trn)
			o.trn.Connect(trn.LocalAddr(), trn)
		}
		f := New(Options{})
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, f, store, store, raft.NewInmemSnapshotStore(), trn)
		if err != nil {
			t.Fatal(err)
		}
		m := &member{r: r, f: f, trn: trn}
		members = append(members, m)
		return m
	}
	defer func() {
		for _, m := range members {
			if err := m.r.Shutdown().Error(); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, id := range []string{"a", "b", "c"} {
		start(id)
	}
	var servers []raft.Server
	for _, m := range members {
		servers = append(servers, raft.Server{ID: raft.ServerID(m.trn.LocalAddr()), Address: m.trn.LocalAddr()})
	}
	if err := members[0].r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	leader := func() *member {
		t.Helper()
		var l *member
		waitFor(t, "a leader", func() bool {
			for _, m := range members {
				if m.r.State() == raft.Leader {
					l = m
					return true
				}
			}
			return false
		})
		return l
	}
	apply := func(c *metav1.Command) {
		t.Helper()
		for {
			b, err := Encode(c, 0, time.Now().UnixMilli())
			if err != nil {
				t.Fatal(err)
			}
			fut := leader().r.Apply(b, 5*time.Second)
			if err := fut.Error(); err == raft.ErrNotLeader || err == raft.ErrLeadershipLost {
				continue // an election moved the leader: propose again
			} else if err != nil {
				t.Fatal(err)
			}
			if r := fut.Response().(*Result); r.Err != nil {
				t.Fatalf("%T: %v", c.Op, r.Err)
			}
			return
		}
	}
	apply(seedCmd(&metav1.Seed{ClusterVersion: 20, MaxQueuedBytes: 1 << 30, LegacyGroup: LegacyGroupID,
		LegacyReplicas: []string{"a", "b", "c"}, Queues: []string{"jobs"}}))
	for i := range 20 {
		apply(register(fmt.Sprintf("g%d", i), "a", "b", "c"))
		apply(place(fmt.Sprintf("q%d", i), fmt.Sprintf("g%d", i)))
	}
	apply(createToken("t1", "alice", 1, 0, "k"))
	l := leader()
	if err := l.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	apply(grant("alice", "q*", 1, false, ""))
	d := start("d")
	if err := l.r.AddVoter("d", d.trn.LocalAddr(), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	apply(drop("q3", "g3"))
	want := leader().f
	waitFor(t, "every replica at the leader's index and digest", func() bool {
		for _, m := range members {
			if m.f.AppliedIndex() != want.AppliedIndex() || m.f.Digest() != want.Digest() {
				return false
			}
		}
		return true
	})
	if _, ok, _ := d.f.Lookup("q5"); !ok || !d.f.Auth().Allowed("alice", 1, "q5") {
		t.Fatal("the new voter lacks the state")
	}
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
