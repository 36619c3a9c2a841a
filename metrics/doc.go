// Package metrics is the Prometheus view of a node's queues: a collector
// that reads the replicated state at scrape time (so applying entries pays
// nothing for it), and the leader's lease histograms, observed where
// deliveries are pushed and settled. docs/metrics.md lists every family.
package metrics
