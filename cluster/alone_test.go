package cluster

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/test/harness"
)

// TestLoneVoterElectsItselfAtOnce: with heartbeat and election timeouts of
// an hour, a single node leads right after its bootstrap and again right
// after a restart on its data dir; without campaignAlone it would wait an
// hour for a leader it cannot hear from. The condition is leadership
// itself, within a deadline far below the timeouts.
func TestLoneVoterElectsItselfAtOnce(t *testing.T) {
	base := runtime.NumGoroutine()
	cfg := testConfig(t, "solo", t.TempDir(), 1)
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = time.Hour, time.Hour
	n := startNode(t, cfg)
	if _, err := n.WaitLeader(ctxTimeout(t, time.Minute)); err != nil {
		t.Fatalf("no leader after bootstrap: %v", err)
	}
	if _, err := n.Apply(ctxTimeout(t, time.Minute), []byte("a")); err != nil {
		t.Fatalf("apply: %v", err)
	}
	shutdown(t, n)

	r := startNode(t, cfg)
	defer harness.CheckNoLeaksWithin(t, base, 10*time.Second)
	defer shutdown(t, r)
	if _, err := r.WaitLeader(ctxTimeout(t, time.Minute)); err != nil {
		t.Fatalf("no leader after restart: %v", err)
	}
	harness.Eventually(t, time.Minute, harness.Holds("state recovered", func() bool { return slices.Equal(r.fsm.Entries(), []string{"a"}) }))
	if rc := r.raft.ReloadableConfig(); rc.HeartbeatTimeout != time.Hour || rc.ElectionTimeout != time.Hour {
		t.Fatalf("timeouts after the campaign: %v, %v; want the configured hour", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
}

func TestAloneVoter(t *testing.T) {
	v := func(id string) raft.Server { return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id)} }
	nv := func(id string) raft.Server { return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id)} }
	for _, c := range []struct {
		name    string
		servers []raft.Server
		want    bool
	}{
		{"empty", nil, false},
		{"self alone", []raft.Server{v("a")}, true},
		{"self with nonvoters", []raft.Server{v("a"), nv("b"), nv("c")}, true},
		{"another voter alone", []raft.Server{v("b"), nv("a")}, false},
		{"two voters", []raft.Server{v("a"), v("b")}, false},
		{"three voters", []raft.Server{v("a"), v("b"), v("c")}, false},
	} {
		if got := aloneVoter(raft.Configuration{Servers: c.servers}, "a"); got != c.want {
			t.Errorf("%s: aloneVoter = %v, want %v", c.name, got, c.want)
		}
	}
}
