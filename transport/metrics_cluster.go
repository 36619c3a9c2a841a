package transport

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	qmetrics "github.com/raftq/raftq/metrics"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftlog"
)

// registerNodeMetrics adds the per-queue collector (every node, from its
// own replicated state), the leader's lease histograms, the Raft and
// cluster collector and the self-healing collector.
func registerNodeMetrics(reg *prometheus.Registry, s *Server) {
	consumers := func(queue string) (int, bool) {
		if !s.legacy.raft.LeaderReady() {
			return 0, false
		}
		return s.legacy.b.Scheduler().Consumers(queue), true
	}
	reg.MustRegister(
		// A node whose state diverged serves no reads from it (replica.go).
		unlessDiverged{s: s, c: qmetrics.NewQueueCollector(s.legacy.state, consumers, time.Now, s.legacy.stats.Drain())},
		s.legacy.stats.LeaseMetrics(),
		newClusterCollector(s),
		newHealCollector(s),
	)
	if n := s.cfg.MetricsTopKeys; n > 0 {
		throttles := func(queue string) ([]*raftqv1.ThrottleKeyStats, bool) {
			if !s.legacy.raft.LeaderReady() {
				return nil, false
			}
			_, th := s.legacy.b.Scheduler().KeyStats(queue)
			return th, true
		}
		reg.MustRegister(qmetrics.NewKeysCollector(s.legacy.state, throttles, n))
	}
}

// followerLagTimeout bounds asking followers for their applied index
// during a scrape; one that does not answer in time has no lag series.
const followerLagTimeout = 500 * time.Millisecond

// clusterCollector reads Raft and gossip state at scrape time.
type clusterCollector struct {
	s *Server

	term, leader, leaderChanges, commit, applied, lag, members, diskFree *prometheus.Desc
	diskKeepFree, diskLow                                                *prometheus.Desc
	snapshots, snapshotBytes, snapshotSecs, snapshotLag, snapshotFails   *prometheus.Desc
	logAppend, logFsync                                                  *prometheus.Desc
}

func newClusterCollector(s *Server) *clusterCollector {
	return &clusterCollector{
		s:             s,
		term:          prometheus.NewDesc("raftq_raft_term", "Current Raft term of this node.", nil, nil),
		leader:        prometheus.NewDesc("raftq_raft_leader", "1 if this node is the Raft leader, else 0.", nil, nil),
		leaderChanges: prometheus.NewDesc("raftq_raft_leader_changes_total", "Leaders this node has seen take office (a new leader or term) since it started.", nil, nil),
		commit:        prometheus.NewDesc("raftq_raft_commit_index", "Raft commit index as this node knows it.", nil, nil),
		applied:       prometheus.NewDesc("raftq_raft_applied_index", "Last Raft index applied to this node's state machine.", nil, nil),
		lag:           prometheus.NewDesc("raftq_raft_follower_lag_entries", "Entries a follower has still to apply, behind the leader's applied index (leader only; a follower that does not answer within 500 ms has no series).", []string{"follower"}, nil),
		members:       prometheus.NewDesc("raftq_gossip_members", "Gossip members this node knows of, by state (alive, failed, left).", []string{"state"}, nil),
		diskFree:      prometheus.NewDesc("raftq_data_dir_free_bytes", "Free bytes available to raftq on the data dir's file system.", nil, nil),
		diskKeepFree:  prometheus.NewDesc("raftq_data_dir_keep_free_bytes", "Free bytes this node keeps on its data dir's file system: --min-free-disk-bytes plus room for its next snapshot and wal log segment. Below it the leader refuses writes that add data.", nil, nil),
		diskLow:       prometheus.NewDesc("raftq_data_dir_disk_low", "1 while this node's data dir has less free space than it keeps free (writes that add data are refused if it leads, or if fewer than a quorum of voters have room), else 0.", nil, nil),
		snapshots:     prometheus.NewDesc("raftq_snapshots_total", "Raft snapshots this node has written to its data dir since it started.", nil, nil),
		snapshotBytes: prometheus.NewDesc("raftq_snapshot_last_bytes", "Size of the newest snapshot this node wrote (0 before the first).", nil, nil),
		snapshotSecs:  prometheus.NewDesc("raftq_snapshot_last_duration_seconds", "Time the newest snapshot took to write, from creation to its final fsync (0 before the first).", nil, nil),
		snapshotLag:   prometheus.NewDesc("raftq_raft_entries_since_snapshot", "Entries this node has applied past its newest snapshot (taken or installed): what its Raft log holds beyond it.", nil, nil),
		snapshotFails: prometheus.NewDesc("raftq_snapshot_failures_total", "Automatic snapshots that failed since this node started (the log is not compacted until one succeeds).", nil, nil),
		logAppend:     prometheus.NewDesc("raftq_raft_log_append_seconds", "Latency of each append to this node's Raft log: entries encoded, written and fsynced in one bolt transaction.", nil, nil),
		logFsync:      prometheus.NewDesc("raftq_raft_log_fsync_seconds", "Disk part of each Raft log append as bbolt times it: pages written and fdatasynced, then the meta page written and fdatasynced.", nil, nil),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.term, c.leader, c.leaderChanges, c.commit, c.applied, c.lag, c.members, c.diskFree, c.diskKeepFree, c.diskLow, c.snapshots, c.snapshotBytes, c.snapshotSecs, c.snapshotLag, c.snapshotFails, c.logAppend, c.logFsync} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := prometheus.GaugeValue
	st := c.s.legacy.node.Status()
	isLeader := 0.0
	if c.s.legacy.raft.IsLeader() {
		isLeader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.term, gauge, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(c.leader, gauge, isLeader)
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, float64(c.s.legacy.stats.LeaderChanges()))
	ch <- prometheus.MustNewConstMetric(c.commit, gauge, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(c.applied, gauge, float64(st.AppliedIndex))
	if isLeader == 1 {
		c.followerLag(ch, st.AppliedIndex)
	}
	byState := map[string]int{"alive": 0, "failed": 0, "left": 0}
	for _, m := range c.s.legacy.node.Members() {
		byState[m.State]++
	}
	for state, n := range byState {
		ch <- prometheus.MustNewConstMetric(c.members, gauge, float64(n), state)
	}
	snap := c.s.legacy.raft.SnapshotStats()
	ch <- prometheus.MustNewConstMetric(c.snapshots, prometheus.CounterValue, float64(snap.Count))
	ch <- prometheus.MustNewConstMetric(c.snapshotBytes, gauge, float64(snap.LastBytes))
	ch <- prometheus.MustNewConstMetric(c.snapshotSecs, gauge, snap.LastDuration.Seconds())
	ch <- prometheus.MustNewConstMetric(c.snapshotLag, gauge, float64(snap.EntriesSince))
	ch <- prometheus.MustNewConstMetric(c.snapshotFails, prometheus.CounterValue, float64(snap.Failed))
	logs := c.s.legacy.raft.LogStoreStats()
	ch <- constHistogram(c.logAppend, logs.Append)
	ch <- constHistogram(c.logFsync, logs.Fsync)
	if r, ok := c.s.legacy.stats.Disk().Measure(); ok {
		ch <- prometheus.MustNewConstMetric(c.diskFree, gauge, float64(r.Free))
		ch <- prometheus.MustNewConstMetric(c.diskKeepFree, gauge, float64(r.Limit))
		low := 0.0
		if r.Low {
			low = 1
		}
		ch <- prometheus.MustNewConstMetric(c.diskLow, gauge, low)
	}
}

// followerLag asks the other nodes for their applied index, as cluster
// status does, and reports how far each is behind this leader.
func (c *clusterCollector) followerLag(ch chan<- prometheus.Metric, leaderApplied uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), followerLagTimeout)
	defer cancel()
	st, _ := (&clusterService{s: c.s}).Status(ctx, &raftqv1.StatusRequest{})
	for _, n := range st.GetNodes() {
		if n.GetId() == c.s.legacy.b.ID() || n.GetAppliedIndex() == 0 {
			continue // this node, or one that did not answer
		}
		lag := float64(0)
		if leaderApplied > n.GetAppliedIndex() {
			lag = float64(leaderApplied - n.GetAppliedIndex())
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, lag, n.GetId())
	}
}

// constHistogram turns a cluster histogram snapshot into a metric.
func constHistogram(d *prometheus.Desc, h raftlog.Histogram) prometheus.Metric {
	bounds := raftlog.LogLatencyBuckets()
	buckets := make(map[float64]uint64, len(bounds))
	for i, b := range bounds {
		if i < len(h.Counts) {
			buckets[b] = h.Counts[i]
		} else {
			buckets[b] = h.Count
		}
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}
