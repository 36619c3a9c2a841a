package cluster

import (
	"runtime"
	"slices"
	"testing"
	"time"

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
	if rc := r.Raft().ReloadableConfig(); rc.HeartbeatTimeout != time.Hour || rc.ElectionTimeout != time.Hour {
		t.Fatalf("timeouts after the campaign: %v, %v; want the configured hour", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
}
