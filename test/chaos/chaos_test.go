//go:build linux

package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// seed is RAFTQ_CHAOS_SEED, or a fresh one (printed by every run).
func seed(t *testing.T) int64 {
	if s := os.Getenv("RAFTQ_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("RAFTQ_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	return rand.Int64N(1 << 40)
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	if s := os.Getenv(name); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, s, err)
		}
		return d
	}
	return def
}

// TestChaosShort is the run `make test` includes (about two minutes): a
// three-node cluster through one of every fault, then a five-node cluster
// through a few, with brief holds.
func TestChaosShort(t *testing.T) {
	requireNetAdmin(t)
	s := seed(t)
	t.Run("nodes=3", func(t *testing.T) {
		runCampaign(t, campaign{Nodes: 3, Seed: s, Kinds: AllFaults, Duration: 30 * time.Second, Short: true})
	})
	t.Run("nodes=5", func(t *testing.T) {
		runCampaign(t, campaign{Nodes: 5, Seed: s, Kinds: []FaultKind{KillLeader, Bridge, SplitMajority, Pause}, Duration: 15 * time.Second, Short: true})
	})
}

// TestChaosCampaign is `make chaos`: every fault on 3 and 5 nodes for
// RAFTQ_CHAOS_DURATION each (default 3m). Knobs: RAFTQ_CHAOS_SEED,
// RAFTQ_CHAOS_NODES (e.g. "3,5"), RAFTQ_CHAOS_FAULTS (e.g.
// "pause,latency"), RAFTQ_CHAOS_OUT (where reports go).
func TestChaosCampaign(t *testing.T) {
	if os.Getenv("RAFTQ_CHAOS") == "" {
		t.Skip("chaos campaign: SKIPPED — long run; set RAFTQ_CHAOS=1 or use `make chaos`")
	}
	requireNetAdmin(t)
	s := seed(t)
	d := envDuration(t, "RAFTQ_CHAOS_DURATION", 3*time.Minute)
	kinds, err := ParseFaults(os.Getenv("RAFTQ_CHAOS_FAULTS"))
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{3, 5}
	if v := os.Getenv("RAFTQ_CHAOS_NODES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 3 {
				t.Fatalf("RAFTQ_CHAOS_NODES=%q: want sizes of at least 3", v)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			runCampaign(t, campaign{Nodes: n, Seed: s, Kinds: kinds, Duration: d})
		})
	}
}
