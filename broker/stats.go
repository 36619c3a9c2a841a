package broker

import (
	"maps"

	"github.com/raftq/raftq/diskguard"
	"github.com/raftq/raftq/metrics"
)

// Stats is what the node's metrics and status read of the data group:
// its counters and the metric sources it owns and feeds. Reading them
// changes nothing. A part of Broker (Broker.Stats), apart from the
// message path and the operator duties, so that each type has one job.
type Stats struct{ b *Broker }

// Stats returns what the group counts and measures.
func (b *Broker) Stats() Stats { return Stats{b: b} }

// Drain holds the per-queue drain-time estimates, for metrics.
func (st Stats) Drain() *metrics.Drain { return st.b.drain }

// LeaseMetrics are the leader's delivery histograms, for the metrics
// registry.
func (st Stats) LeaseMetrics() *metrics.Leases { return st.b.leases }

// LeaderChanges counts the leaders this node has seen take office (a
// new leader id or term) since it started.
func (st Stats) LeaderChanges() uint64 { return st.b.leader.changes.Load() }

// AuditedQueues counts the queues the leader's counter audit recounted
// on this node since it started (audit.go).
func (st Stats) AuditedQueues() uint64 { return st.b.audit.audited.Load() }

// Disk is the node's disk guard, for metrics and status (disk.go).
func (st Stats) Disk() *diskguard.Guard { return st.b.disk.guard }

// Pending is the bytes of client writes this node holds in front of Raft
// (gate.go).
func (st Stats) Pending() int64 { return st.b.gate.used.Load() }

// Divergences counts, by node, the replica checks led by this node that
// found that node's state digest differing from the replicas'
// (replica.go).
func (st Stats) Divergences() map[string]uint64 {
	st.b.repairs.mu.Lock()
	defer st.b.repairs.mu.Unlock()
	return maps.Clone(st.b.repairs.divergences)
}

// CorruptRepairs counts the nodes this leader removed because they found
// their own Raft state corrupt (Operator.RemoveCorrupt).
func (st Stats) CorruptRepairs() uint64 {
	st.b.repairs.mu.Lock()
	defer st.b.repairs.mu.Unlock()
	return st.b.repairs.corrupt
}
