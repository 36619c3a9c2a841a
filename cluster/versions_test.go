package cluster

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/test/harness"
)

func TestMetaLogVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		want uint32
	}{
		{"build before log versions", `{"id":"a","raft":"127.0.0.1:1","expect":3,"state":true}`, 1},
		{"explicit 1", `{"id":"a","raft":"127.0.0.1:1","expect":3,"log_version":1}`, 1},
		{"newer", `{"id":"a","raft":"127.0.0.1:1","expect":3,"log_version":4}`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m membership.Meta
			if err := json.Unmarshal([]byte(tc.json), &m); err != nil {
				t.Fatal(err)
			}
			if got := m.EffectiveLogVersion(); got != tc.want {
				t.Fatalf("logVersion = %d, want %d", got, tc.want)
			}
		})
	}
	// A node advertises its configured version; the default is 1.
	for _, tc := range []struct{ cfg, want uint32 }{{0, 1}, {1, 1}, {7, 7}} {
		cfg := Config{NodeID: "a", DataDir: "d", GossipBind: "127.0.0.1:2", LogVersion: tc.cfg}
		c, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		ms, err := membership.New(c.membership(nil), testLogger(), "127.0.0.1:1", false, false)
		if err != nil {
			t.Fatal(err)
		}
		m0, _ := ms.MetaOf("a") // its own: the metadata it advertises
		b, _ := json.Marshal(m0)
		var m membership.Meta
		if err := json.Unmarshal(b, &m); err != nil || m.EffectiveLogVersion() != tc.want {
			t.Fatalf("LogVersion %d advertised as %s (%d, %v), want %d", tc.cfg, b, m.EffectiveLogVersion(), err, tc.want)
		}
	}
}

func TestVoterVersions(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	acfg := testConfig(t, "a", dir, 1)
	acfg.LogVersion = 3
	a := startNode(t, acfg)
	defer shutdown(t, a)
	if _, err := a.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	harness.Eventually(t, 5*time.Second, harness.Holds("a alone in its configuration", func() bool { return len(voters(a)) == 1 }))
	v := a.VoterVersions()
	if v.Min != 3 || !v.Complete || v.Voters != 1 {
		t.Fatalf("one voter: %+v", v)
	}

	// b joins advertising an older version: the minimum falls to it, and
	// a's Changed says so without polling.
	bcfg := testConfig(t, "b", dir, 1)
	bcfg.LogVersion = 2
	bcfg.Join = []string{a.GossipAddr()}
	b := startNode(t, bcfg)
	defer shutdown(t, b)
	ctx := ctxTimeout(t, 15*time.Second)
	for v.Min != 2 || !v.Complete || v.Voters != 2 {
		select {
		case <-v.Changed:
		case <-ctx.Done():
			t.Fatalf("voter versions never became min 2 of 2 voters: %+v", v)
		}
		v = a.VoterVersions()
	}
	for _, n := range []*testNode{a, b} {
		want := map[string]uint32{"a": 3, "b": 2}
		harness.Eventually(t, 5*time.Second, harness.Holds("both members' versions on "+n.ID(), func() bool {
			got := map[string]uint32{}
			for _, m := range n.Members() {
				got[m.ID] = m.LogVersion
			}
			return got["a"] == want["a"] && got["b"] == want["b"]
		}))
		harness.Eventually(t, 5*time.Second, harness.Holds("both nodes' versions in the status of "+n.ID(), func() bool {
			st := n.Status()
			if len(st.Nodes) != 2 {
				return false
			}
			for _, ns := range st.Nodes {
				if ns.LogVersion != want[ns.ID] {
					return false
				}
			}
			return true
		}))
	}
	shutdown(t, b)
	shutdown(t, a)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}
