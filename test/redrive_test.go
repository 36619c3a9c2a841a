package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestRateLimitedRedriveAcrossFailover: on a real 3-node cluster, a dry
// run moves nothing, and a redrive of N messages at R a second keeps to
// its rate by the replicated clock (never more than R + R·t moved t
// seconds after it started, so the N took at least N/R − 1 s), carries on
// after the leader is killed, and disappears from GetQueue when done.
func TestRateLimitedRedriveAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process failover")
	}
	const n, rate = 60, 10
	nodes, c := startCluster(t, 3)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	var msgs []*raftqv1.EnqueueMessage
	for i := 0; i < n; i++ {
		// Their TTL passes at once: dead-lettered, reason ttl.
		msgs = append(msgs, &raftqv1.EnqueueMessage{Payload: []byte(fmt.Sprint(i)), TtlMs: 50, FairnessKey: "tenant-a"})
	}
	if _, err := c.Enqueue(ctx, "jobs", msgs...); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, func() error {
		qi, err := c.GetQueue(ctx, "jobs", false)
		if err != nil || qi.Stats.DeadLettered != n {
			return fmt.Errorf("%v dead-lettered (%v)", qi.GetStats().GetDeadLettered(), err)
		}
		return nil
	})

	dry, err := c.RedriveWith(ctx, &raftqv1.RedriveRequest{Queue: "jobs", DryRun: true, ReasonContains: "ttl", FairnessKey: "tenant-a"})
	if err != nil || dry.Moved != n {
		t.Fatalf("dry run: %v, %v; want %d", dry, err, n)
	}
	if qi, err := c.GetQueue(ctx, "jobs", false); err != nil || qi.Stats.DeadLettered != n || qi.Stats.Ready != 0 {
		t.Fatalf("after a dry run: %v, %v", qi.GetStats(), err)
	}

	asked := time.Now()
	job, err := c.RedriveWith(ctx, &raftqv1.RedriveRequest{Queue: "jobs", ReasonContains: "ttl", RatePerSec: rate})
	if err != nil || job.Moved != n || job.JobId == "" {
		t.Fatalf("rate-limited redrive: %v, %v; want %d and a job", job, err, n)
	}
	// Watch it: each observation is (moved, the replicated clock at its
	// last step), both from the state, so the bound is exact.
	check := func(j *raftqv1.RedriveJob) {
		t.Helper()
		el := j.GetLastMovedAtMs() - j.GetStartedAtMs()
		if j.GetMoved() > 0 && j.GetMoved() > rate+rate*el/1000 {
			t.Fatalf("moved %d after %d ms of the replicated clock: more than %d + %d/s", j.GetMoved(), el, rate, rate)
		}
	}
	var last *raftqv1.RedriveJob
	killed := false
	var leader *harness.Node
	harness.Eventually(t, 90*time.Second, func() error {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		qi, err := c.GetQueue(qctx, "jobs", false)
		if err != nil {
			return err // an election: the client retries
		}
		if len(qi.Redrives) == 0 {
			if qi.Stats.Ready != n || qi.Stats.DeadLettered != 0 {
				t.Fatalf("job gone with %v", qi.Stats)
			}
			return nil
		}
		j := qi.Redrives[0]
		if j.GetId() != job.JobId || j.GetTotal() != n {
			t.Fatalf("GetQueue shows %v, want job %s of %d", j, job.JobId, n)
		}
		if ready := qi.Stats.Ready; ready != j.GetMoved() {
			t.Fatalf("ready %d, the job says it moved %d", ready, j.GetMoved())
		}
		check(j)
		if last != nil && j.GetMoved() < last.GetMoved() {
			t.Fatalf("moved went back from %d to %d", last.GetMoved(), j.GetMoved())
		}
		last = j
		if !killed && j.GetMoved() >= n/3 {
			leader = leaderOf(t, nodes)
			t.Logf("killing leader %s at %d of %d moved", leader.ID, j.GetMoved(), n)
			leader.Kill()
			killed = true
		}
		return fmt.Errorf("job at %d of %d", j.GetMoved(), n)
	})
	took := time.Since(asked)
	if !killed || last == nil || last.GetMoved() <= n/3 {
		t.Fatalf("the job was not seen moving after the kill (killed %v, last %v)", killed, last)
	}
	// The last observation before it finished, on the replicated clock:
	// moving m took at least m/R − 1 s.
	if el, m := last.GetLastMovedAtMs()-last.GetStartedAtMs(), last.GetMoved(); el < (m-rate)*1000/rate {
		t.Fatalf("%d moved after %d ms of the replicated clock, the rate allows no less than %d ms", m, el, (m-rate)*1000/rate)
	}
	// The whole: the replicated clock never runs ahead of this host's, so
	// N/R − 1 s by it is at least as long here.
	if min := time.Duration(n/rate-1) * time.Second; took < min {
		t.Fatalf("%d messages at %d/s took %v, less than %v", n, rate, took, min)
	}
	t.Logf("%d messages at %d/s took %v across a leader kill; last seen %d moved at %d ms", n, rate, took.Round(time.Millisecond), last.GetMoved(), last.GetLastMovedAtMs()-last.GetStartedAtMs())
	leader.Start()
	verifyConsistent(t, c, 3)
}
