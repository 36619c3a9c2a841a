package cluster

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// watchSuffrage records every suffrage of id that n's configuration
// showed, in order, polling every 5 ms (faster than any phase it must see
// lasts) until the returned stop is called, and once more then.
func watchSuffrage(n *testNode, id string) (seen func() []string, stop func()) {
	return harness.WatchChanges(5*time.Millisecond, func() string { return suffrage(n, id) })
}

// TestNonvoterPromotedOnceCaughtUp: a node that joins a running cluster
// is added as a nonvoter, stays one while its applied index is further
// than PromoteMaxLag behind the leader's commit index (or unknown), and
// becomes a voter only after it has stayed caught up for PromoteAfter.
func TestNonvoterPromotedOnceCaughtUp(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	acfg := testConfig(t, "a", dir, 1)
	acfg.PromoteAfter = 500 * time.Millisecond
	acfg.PromoteMaxLag = 8
	// b's progress as the leader learns it: held far behind at first (a
	// slow node), or not answering.
	var mode atomic.Int32 // 0 behind, 1 unknown, 2 the real answer
	probes := map[int32]*atomic.Int64{0: {}, 1: {}, 2: {}}
	acfg.PeerProgress = func(ctx context.Context, id, addr string) (uint64, error) {
		m := mode.Load()
		if id == "b" {
			probes[m].Add(1)
		}
		switch {
		case id == "b" && m == 0:
			return 1, nil
		case id == "b" && m == 1:
			return 0, fmt.Errorf("no answer from %s", id)
		}
		return dialProgress(ctx, id, addr)
	}
	a := startNode(t, acfg)
	defer shutdown(t, a)
	if _, err := a.WaitLeader(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	for i := range 50 {
		if _, err := a.Apply(ctxTimeout(t, 5*time.Second), fmt.Appendf(nil, "e%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	seen, stopWatch := watchSuffrage(a, "b")
	defer stopWatch()
	bcfg := testConfig(t, "b", dir, 1)
	bcfg.Join = []string{a.GossipAddr()}
	b := startNode(t, bcfg)
	defer shutdown(t, b)
	harness.Eventually(t, 15*time.Second, harness.Holds("b added as a nonvoter", func() bool { return suffrage(a, "b") == "Nonvoter" }))
	harness.Eventually(t, 15*time.Second, harness.Holds("b to hold the log", func() bool { return len(b.fsm.Entries()) >= 50 }))

	for _, m := range []int32{0, 1} {
		mode.Store(m)
		// Several checks, over longer than PromoteAfter, find b behind:
		// it stays a nonvoter.
		start, from := time.Now(), probes[m].Load()
		harness.Eventually(t, 15*time.Second, harness.Holds("checks of b's progress", func() bool {
			return probes[m].Load() >= from+3 && time.Since(start) > 2*acfg.PromoteAfter
		}))
		if got := suffrage(a, "b"); got != "Nonvoter" {
			t.Fatalf("mode %d: b is %q while behind, want Nonvoter", m, got)
		}
	}

	released := time.Now()
	mode.Store(2)
	harness.Eventually(t, 15*time.Second, harness.Holds("b promoted to voter", func() bool { return slices.Equal(voters(a), []string{"a", "b"}) }))
	if d := time.Since(released); d < acfg.PromoteAfter {
		t.Errorf("b promoted %v after it caught up, before PromoteAfter (%v)", d, acfg.PromoteAfter)
	}
	stopWatch()
	if got, want := seen(), []string{"", "Nonvoter", "Voter"}; !slices.Equal(got, want) {
		t.Errorf("b's suffrage went %q, want %q", got, want)
	}
	if _, err := b.WaitLeader(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	shutdown(t, b)
	shutdown(t, a)
	harness.CheckNoLeaksWithin(t, base, 10*time.Second)
}
