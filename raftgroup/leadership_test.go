package raftgroup

import (
	"testing"
	"time"
)

// A heartbeat goroutine of a term this node has lost may report a failure
// after the loss (its RPC was in flight). Recorded, it would mark the peer
// unreachable in a later term that never reports it resumed.
func TestHeartbeatFailuresFromALostTermAreIgnored(t *testing.T) {
	lost := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		lastContact []time.Time // reports, in order
		want        time.Time   // zero: not failing
	}{
		{"stale report from the lost term", []time.Time{lost.Add(-5 * time.Second)}, time.Time{}},
		{"report from the current term", []time.Time{lost.Add(2 * time.Second)}, lost.Add(2 * time.Second)},
		{"first report of the term kept", []time.Time{lost.Add(2 * time.Second), lost.Add(3 * time.Second)}, lost.Add(2 * time.Second)},
		{"stale report after a current one", []time.Time{lost.Add(2 * time.Second), lost.Add(-time.Second)}, lost.Add(2 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLeadership("self", "", "", nil, testLogger(), nil, nil)
			l.hbClearedAt = lost
			l.cur.Role = RoleLeader // leading again, in a later term
			for _, lc := range tc.lastContact {
				l.noteHeartbeatFailure("p", lc)
			}
			got, failing := l.failedHeartbeats()["p"]
			if failing != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Fatalf("failing %v since %v, want since %v", failing, got, tc.want)
			}
		})
	}
}

// A heartbeat goroutine of a lost term may report its failure while this
// node is not leading, with a LastContact after the loss (raft's old
// replication goroutines run on until their RPC times out). Kept, it
// marked the peer unreachable through this node's next term, in which
// heartbeats never failed and so never resumed: the chaos campaign's
// membership fault saw a healthy follower "unreachable" for a minute.
func TestHeartbeatFailureReportedWhileNotLeadingIsForgotten(t *testing.T) {
	lost := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := newLeadership("self", "", "", nil, testLogger(), nil, nil)
	l.hbClearedAt = lost
	l.noteHeartbeatFailure("p", lost.Add(8*time.Second)) // a follower now
	l.leaderChanged("self")                              // leading again
	if since, failing := l.failedHeartbeats()["p"]; failing {
		t.Fatalf("p failing since %v in a term whose heartbeats never failed", since)
	}
	// A report of this term counts, and another leader's term forgets it.
	l.mu.Lock()
	l.cur.Role = RoleLeader
	l.mu.Unlock()
	l.noteHeartbeatFailure("p", time.Now())
	if _, failing := l.failedHeartbeats()["p"]; !failing {
		t.Fatal("a failure of the current term was not recorded")
	}
	l.leaderChanged("other")
	if _, failing := l.failedHeartbeats()["p"]; failing {
		t.Fatal("still failing after another node became leader")
	}
}

// Raft reports a failing peer again at every failed heartbeat (at least
// every transport timeout plus the backoff); its one "resumed" may never
// reach the leader's record (a report from a term's goroutine that ends
// after its failure, or an observation Raft dropped while the loop was
// slow). A failure not reported again within staleAfter is over: the
// 5-node chaos run's leader showed a healthy, applying follower
// unreachable for the whole minute after healing (last_contact_ms 66163).
func TestHeartbeatFailureNotReportedAgainIsOver(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := start
	l := newLeadership("self", "", "", nil, testLogger(), nil, nil)
	l.now = func() time.Time { return now }
	l.cur.Role = RoleLeader
	l.noteHeartbeatFailure("p", start.Add(-time.Second))
	for _, step := range []struct {
		after   time.Duration
		report  bool
		failing bool
	}{
		{after: l.staleAfter / 2, report: true, failing: true}, // reported again: still failing
		{after: l.staleAfter / 2, failing: true},               // within the window of the last report
		{after: l.staleAfter, failing: false},                  // not reported again: over
	} {
		now = now.Add(step.after)
		if step.report {
			l.noteHeartbeatFailure("p", start.Add(-time.Second))
		}
		since, failing := l.failedHeartbeats()["p"]
		if failing != step.failing {
			t.Fatalf("at +%v: failing %v, want %v", now.Sub(start), failing, step.failing)
		}
		if failing && !since.Equal(start.Add(-time.Second)) {
			t.Fatalf("since %v, want the first report's last contact", since)
		}
	}
}
