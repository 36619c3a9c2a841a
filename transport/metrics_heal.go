package transport

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// healCollector reports the self-healing work: counter repairs this node
// applied, queues the leader's audit recounted, replica divergence found
// (as leader) or known (of itself). Read at scrape.
type healCollector struct {
	s *Server

	repairs, audited, diverged, corrupt, divergences, corruptRepairs *prometheus.Desc
}

func newHealCollector(s *Server) *healCollector {
	return &healCollector{
		s: s,
		repairs: prometheus.NewDesc("raftq_counter_repairs_total",
			"Recounts that changed a queue's counters on this node (queue=\"\" is the node's byte total). Every repair is a bug report: counters are kept by one chokepoint and should never drift.",
			[]string{"queue"}, nil),
		audited: prometheus.NewDesc("raftq_audit_queues_recounted_total",
			"Queues whose counters this node's counter audit recounted, since it started (every node audits its own).", nil, nil),
		diverged: prometheus.NewDesc("raftq_replica_diverged",
			"1 once this node learnt that its state digest differs from the replicas' (it then serves no reads from its state until repaired), else 0.", nil, nil),
		corrupt: prometheus.NewDesc("raftq_raft_state_corrupt",
			"1 while this node's own Raft state (a log entry, wal segment or snapshot) is known corrupt: it takes no part in Raft and serves nothing until it is removed and rebuilt from its peers, else 0.", nil, nil),
		divergences: prometheus.NewDesc("raftq_replica_divergence_total",
			"Replica checks led by this node that found a node's state digest differing from the replicas' (node is the one that differed). Every one is a bug report.",
			[]string{"node"}, nil),
		corruptRepairs: prometheus.NewDesc("raftq_corrupt_repairs_total",
			"Nodes this leader removed from the configuration because they found their own Raft state corrupt, so that they rejoin with the leader's state.", nil, nil),
	}
}

func (c *healCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.repairs
	ch <- c.audited
	ch <- c.diverged
	ch <- c.corrupt
	ch <- c.divergences
	ch <- c.corruptRepairs
}

func (c *healCollector) Collect(ch chan<- prometheus.Metric) {
	repairs := c.s.legacy.checks.CounterRepairs()
	for _, q := range slices.Sorted(maps.Keys(repairs)) {
		ch <- prometheus.MustNewConstMetric(c.repairs, prometheus.CounterValue, float64(repairs[q]), q)
	}
	ch <- prometheus.MustNewConstMetric(c.audited, prometheus.CounterValue, float64(c.s.legacy.stats.AuditedQueues()))
	d := 0.0
	if c.s.Diverged() {
		d = 1
	}
	ch <- prometheus.MustNewConstMetric(c.diverged, prometheus.GaugeValue, d)
	corrupt := 0.0
	if c.s.legacy.raft.Corrupt() != nil {
		corrupt = 1
	}
	ch <- prometheus.MustNewConstMetric(c.corrupt, prometheus.GaugeValue, corrupt)
	// Counted by the data group, whose replica check (a leader duty) and
	// repairs find them (broker/replica.go).
	div := c.s.legacy.stats.Divergences()
	for _, n := range slices.Sorted(maps.Keys(div)) {
		ch <- prometheus.MustNewConstMetric(c.divergences, prometheus.CounterValue, float64(div[n]), n)
	}
	ch <- prometheus.MustNewConstMetric(c.corruptRepairs, prometheus.CounterValue, float64(c.s.legacy.stats.CorruptRepairs()))
}

// unlessDiverged collects c only while this node's state is not known to
// have diverged: a diverged node's queue numbers are wrong, and must not
// be read as the cluster's.
type unlessDiverged struct {
	s *Server
	c prometheus.Collector
}

func (u unlessDiverged) Describe(ch chan<- *prometheus.Desc) { u.c.Describe(ch) }

func (u unlessDiverged) Collect(ch chan<- prometheus.Metric) {
	if !u.s.Diverged() && u.s.legacy.raft.Corrupt() == nil {
		u.c.Collect(ch)
	}
}
