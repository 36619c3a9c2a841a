package chaos

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// The soak (make soak): the chaos campaign's mixed workload and faults for
// a long time on one cluster, with every node's resources sampled three
// times: after a warm-up without faults (the baseline), half way through
// the faults, and at the end of the quiet phase (the cluster healed, the
// workload still running, so the end is measured under the same load as
// the baseline). Flat means: at the end, each node's resource is at most
// growthFactor times its baseline plus a slack (below). A node that was
// restarted by a fault starts afresh (the table marks it), so for it the
// check says that it comes back to the level it had, not that one
// process leaks nothing; with every fault kind (rolling restarts
// included) every node restarts, so a within-process leak check runs the
// soak with RAFTQ_CHAOS_FAULTS naming kinds that restart nothing (e.g.
// pause,partition-leader,partition-split,partition-bridge,packet-loss,latency).

// InvResourceGrowth: a node's resource grew past its bound during a soak,
// or could not be sampled at its start or end.
const InvResourceGrowth = "resource-growth"

// Violations are the verdict as checker violations.
func (v *SoakVerdict) Violations() []Violation {
	var out []Violation
	for _, g := range append(append([]string(nil), v.Growths...), v.Missing...) {
		out = append(out, Violation{Invariant: InvResourceGrowth, Detail: g})
	}
	return out
}

// Resources is one node's figures at one moment.
type Resources struct {
	Node       string `json:"node"`
	Phase      string `json:"phase"`
	OK         bool   `json:"ok"` // sampled (a paused or stopped node is not)
	Err        string `json:"err,omitempty"`
	Pid        int    `json:"pid"`
	RSSBytes   int64  `json:"rss_bytes"`  // /proc/PID/status VmRSS
	OpenFiles  int    `json:"open_files"` // entries of /proc/PID/fd
	Goroutines int    `json:"goroutines"` // go_goroutines in /metrics
	LogBytes   int64  `json:"log_bytes"`  // the Raft log: data dir's wal/ and raft.db
	DataBytes  int64  `json:"data_bytes"` // the whole data dir (log, snapshots, ...)
}

// The bounds of "flat". The factor is the 1.5× the value after
// warm-up; the slacks keep small baselines from failing on noise that is
// no leak: the Go heap's GC target and the scheduler's buffers move RSS by
// tens of MiB, goroutines and files follow the number of streams and
// connections the faults leave open at the moment of a sample, and the
// Raft log holds up to a snapshot interval plus the trailing logs
// (hashicorp/raft's SnapshotThreshold 8192 and TrailingLogs 10240
// entries) before compaction, whatever its size at the baseline.
const (
	growthFactor    = 1.5
	rssSlackBytes   = 64 << 20
	goroutineSlack  = 100
	openFileSlack   = 32
	logSlackBytes   = 128 << 20
	dataSlackBytes  = 256 << 20
	soakPhaseStart  = "start"
	soakPhaseMiddle = "middle"
	soakPhaseEnd    = "end"
)

// SoakVerdict judges samples (any order) and renders them.
type SoakVerdict struct {
	Samples []Resources `json:"samples"`
	// Growths are the resources that grew past their bound, one line each.
	Growths []string `json:"growths,omitempty"`
	// Missing are the nodes with no start or end sample.
	Missing []string `json:"missing,omitempty"`
}

// OK reports whether every node was sampled at start and end and nothing
// grew past its bound.
func (v *SoakVerdict) OK() bool { return len(v.Growths) == 0 && len(v.Missing) == 0 }

// JudgeSoak compares each node's end sample with its start sample.
func JudgeSoak(samples []Resources) *SoakVerdict {
	v := &SoakVerdict{Samples: samples}
	at := map[string]map[string]Resources{}
	var nodes []string
	for _, s := range samples {
		if at[s.Node] == nil {
			at[s.Node] = map[string]Resources{}
			nodes = append(nodes, s.Node)
		}
		if s.OK {
			at[s.Node][s.Phase] = s
		}
	}
	for _, n := range nodes {
		start, ok1 := at[n][soakPhaseStart]
		end, ok2 := at[n][soakPhaseEnd]
		if !ok1 || !ok2 {
			v.Missing = append(v.Missing, fmt.Sprintf("%s: no %s sample", n, map[bool]string{true: soakPhaseEnd, false: soakPhaseStart}[ok1]))
			continue
		}
		check := func(what string, s, e, slack int64, unit func(int64) string) {
			if bound := int64(growthFactor*float64(s)) + slack; e > bound {
				v.Growths = append(v.Growths, fmt.Sprintf("%s: %s grew from %s to %s, past the bound %s (%.1f× + %s)",
					n, what, unit(s), unit(e), unit(bound), growthFactor, unit(slack)))
			}
		}
		count := func(x int64) string { return fmt.Sprint(x) }
		check("RSS", start.RSSBytes, end.RSSBytes, rssSlackBytes, mibs)
		check("goroutines", int64(start.Goroutines), int64(end.Goroutines), goroutineSlack, count)
		check("open files", int64(start.OpenFiles), int64(end.OpenFiles), openFileSlack, count)
		check("Raft log", start.LogBytes, end.LogBytes, logSlackBytes, mibs)
		check("data dir", start.DataBytes, end.DataBytes, dataSlackBytes, mibs)
	}
	return v
}

func mibs(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Table renders the samples per node and phase, and the verdict.
func (v *SoakVerdict) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tphase\tpid\tRSS\tgoroutines\topen files\tRaft log\tdata dir\t")
	startPid := map[string]int{}
	for _, s := range v.Samples {
		if s.OK && s.Phase == soakPhaseStart {
			startPid[s.Node] = s.Pid
		}
	}
	for _, s := range v.Samples {
		restarted := ""
		if s.OK && s.Phase != soakPhaseStart && startPid[s.Node] != 0 && s.Pid != startPid[s.Node] {
			restarted = "(restarted since start)"
		}
		if !s.OK {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t(%s)\n", s.Node, s.Phase, s.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Node, s.Phase, s.Pid, mibs(s.RSSBytes), s.Goroutines, s.OpenFiles, mibs(s.LogBytes), mibs(s.DataBytes), restarted)
	}
	tw.Flush()
	switch {
	case v.OK():
		fmt.Fprintf(&b, "flat: every node's end is within %.1f× its start plus slack (RSS %s, goroutines %d, files %d, log %s, data %s)\n",
			growthFactor, mibs(rssSlackBytes), goroutineSlack, openFileSlack, mibs(logSlackBytes), mibs(dataSlackBytes))
	default:
		for _, g := range append(v.Growths, v.Missing...) {
			fmt.Fprintf(&b, "NOT FLAT: %s\n", g)
		}
	}
	return b.String()
}
