package workload

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Binary is a raftq binary a mode runs, under a label for the tables.
type Binary struct {
	Label string `json:"label"`
	Path  string `json:"path"`
}

// ThrottleResult is the issue-11 item-3 figures: how long Apply waits
// behind the leader's scheduling passes when a large backlog is throttled.
type ThrottleResult struct {
	Keys        int           `json:"keys"`
	PerKey      int           `json:"messages_per_key"`
	PayloadSize int           `json:"payload_size"`
	ProbeRate   float64       `json:"probe_per_sec"`
	Runs        []ThrottleRun `json:"runs"`
}

// ThrottleRun is one fresh node: the backlog, then the probe's single
// enqueues (to another queue) with their latency.
type ThrottleRun struct {
	Binary string `json:"binary"`
	// Throttled: every key throttled (its one token delivered) with an
	// acking consumer that has credit; otherwise no rules and no consumer.
	Throttled     bool           `json:"throttled"`
	FillSecs      float64        `json:"fill_seconds"`
	Delivered     int64          `json:"delivered"`
	Probe         LatencySummary `json:"probe_latency"`
	ProbeAchieved float64        `json:"probe_achieved_per_sec"`
	ProbeErrors   int64          `json:"probe_errors"`
	Error         string         `json:"error,omitempty"`
}

// WriteThrottle prints the issue-11 item-3 table.
func WriteThrottle(w io.Writer, r *ThrottleResult) {
	fmt.Fprintf(w, "throttled backlog: %d keys × %d messages of %d B; probe: single enqueues to another queue at %.0f/s\n",
		r.Keys, r.PerKey, r.PayloadSize, r.ProbeRate)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "binary\tbacklog\tfill s\tprobe p50 ms\tp99 ms\tmax ms\tprobe/s\terrors\t")
	for _, run := range r.Runs {
		backlog := "idle, no rules"
		if run.Throttled {
			backlog = "all throttled, consumer"
		}
		if run.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\terror: %s\t\t\t\t\t\t\n", run.Binary, backlog, run.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.2f\t%.2f\t%.2f\t%.0f\t%d\t\n", run.Binary, backlog, run.FillSecs,
			run.Probe.P50, run.Probe.P99, run.Probe.Max, run.ProbeAchieved, run.ProbeErrors)
	}
	_ = tw.Flush()
}
