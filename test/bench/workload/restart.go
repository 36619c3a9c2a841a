package workload

import (
	"fmt"
	"io"
)

// RestartResult is the restart mode's figures: one data dir of Messages
// messages (a snapshot and Tail entries after it), started by each
// binary in turn after kill -9.
type RestartResult struct {
	Messages      int64        `json:"messages"`
	PayloadSize   int          `json:"payload_size"`
	Headers       int          `json:"headers"`
	Tail          int          `json:"tail_entries"`
	FillSecs      float64      `json:"fill_seconds"`
	SnapshotBytes int64        `json:"snapshot_dir_bytes"`
	DataDirBytes  int64        `json:"data_dir_bytes"`
	Expected      int64        `json:"expected_messages"`
	Runs          []RestartRun `json:"runs"`
	Error         string       `json:"error,omitempty"`
}

// RestartRun is one start of a copy of the data dir.
type RestartRun struct {
	Binary string `json:"binary"`
	Round  int    `json:"round"`
	// AnswerSecs and ReadySecs are from the process's launch until the API
	// first answers and until every message is visible. RestoreSecs is
	// the snapshot's restore as the node logs it, StartupSecs the node's
	// start as it logs it (both -1 when not logged).
	AnswerSecs  float64 `json:"first_answer_seconds"`
	ReadySecs   float64 `json:"all_messages_seconds"`
	RestoreSecs float64 `json:"restore_seconds"`
	StartupSecs float64 `json:"startup_seconds"`
	// CPUSecs is the node's CPU time (user and system) when every message
	// was visible: the restart's cost, which a loaded machine stretches
	// into a longer wall time.
	CPUSecs    float64 `json:"cpu_seconds"`
	RSSBytes   int64   `json:"rss_bytes"`
	LoadAvg    string  `json:"load_avg_start"`
	LoadAvgEnd string  `json:"load_avg_end"`
	Profile    string  `json:"profile,omitempty"`
}

// WriteRestart prints the restart mode's figures, one line per run.
func WriteRestart(w io.Writer, r *RestartResult) {
	fmt.Fprintf(w, "restart: %d messages of %d B (%d headers and a dedup id each), snapshot %.0f MiB, data dir %.0f MiB, %d entries after the snapshot; filled in %.1fs\n",
		r.Messages, r.PayloadSize, r.Headers, float64(r.SnapshotBytes)/(1<<20), float64(r.DataDirBytes)/(1<<20), r.Tail, r.FillSecs)
	fmt.Fprintf(w, "%-10s %5s %10s %10s %10s %10s %8s %9s  %s\n", "binary", "round", "answer s", "all s", "restore s", "startup s", "CPU s", "RSS MiB", "load avg (start / end)")
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%-10s %5d %10.2f %10.2f %10.2f %10.2f %8.2f %9.0f  %s / %s\n", run.Binary, run.Round, run.AnswerSecs, run.ReadySecs,
			run.RestoreSecs, run.StartupSecs, run.CPUSecs, float64(run.RSSBytes)/(1<<20), run.LoadAvg, run.LoadAvgEnd)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "restart: error: %s\n", r.Error)
	}
}
