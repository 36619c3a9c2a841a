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
