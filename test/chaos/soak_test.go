//go:build linux

package chaos

import (
	"os"
	"testing"
	"time"
)

// TestSoak is `make soak`: the campaign's mixed workload and every fault
// on one 3-node cluster for RAFTQ_SOAK_DURATION (default 30m) after a
// warm-up without faults that lasts until the backlog and every node's
// RSS are steady (at least 1m, at most RAFTQ_SOAK_WARMUP, default 8m),
// every node's RSS, goroutines, open files and log size sampled at the
// start, the middle and the end, and every 15 s in between. It fails if anything was lost (every invariant of
// the campaign) or a resource is not flat (soak.go says how that is
// judged). RAFTQ_CHAOS_SEED replays; RAFTQ_CHAOS_FAULTS picks the fault
// kinds (default: all).
func TestSoak(t *testing.T) {
	if os.Getenv("RAFTQ_SOAK") == "" {
		t.Skip("soak: SKIPPED — long run; set RAFTQ_SOAK=1 or use `make soak`")
	}
	requireNetAdmin(t)
	d := envDuration(t, "RAFTQ_SOAK_DURATION", 30*time.Minute)
	warm := envDuration(t, "RAFTQ_SOAK_WARMUP", 8*time.Minute)
	// The fault phase may overrun its plan by half (runCampaign), then
	// heal, the quiet phase and the drain follow.
	if dl, ok := t.Deadline(); ok && time.Until(dl) < warm+d*3/2+10*time.Minute {
		t.Fatalf("-timeout leaves %v; a soak of %v needs at least %v", time.Until(dl).Round(time.Second), d, warm+d*3/2+10*time.Minute)
	}
	kinds, err := ParseFaults(os.Getenv("RAFTQ_CHAOS_FAULTS"))
	if err != nil {
		t.Fatal(err)
	}
	runCampaign(t, campaign{Nodes: 3, Seed: seed(t), Kinds: kinds, Duration: d, Soak: true, WarmUp: warm})
}
