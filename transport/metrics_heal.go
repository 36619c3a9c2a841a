package transport

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// healCollector reports the self-healing work: counter repairs this node
// applied, queues the leader's audit recounted. Read at scrape.
type healCollector struct {
	s *Server

	repairs, audited *prometheus.Desc
}

func newHealCollector(s *Server) *healCollector {
	return &healCollector{
		s: s,
		repairs: prometheus.NewDesc("raftq_counter_repairs_total",
			"Recounts that changed a queue's counters on this node (queue=\"\" is the node's byte total). Every repair is a bug report: counters are kept by one chokepoint and should never drift.",
			[]string{"queue"}, nil),
		audited: prometheus.NewDesc("raftq_audit_queues_recounted_total",
			"Queues whose counters this node's counter audit recounted while it led, since it started.", nil, nil),
	}
}

func (c *healCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.repairs
	ch <- c.audited
}

func (c *healCollector) Collect(ch chan<- prometheus.Metric) {
	repairs := c.s.state.CounterRepairs()
	for _, q := range slices.Sorted(maps.Keys(repairs)) {
		ch <- prometheus.MustNewConstMetric(c.repairs, prometheus.CounterValue, float64(repairs[q]), q)
	}
	ch <- prometheus.MustNewConstMetric(c.audited, prometheus.CounterValue, float64(c.s.b.AuditedQueues()))
}
