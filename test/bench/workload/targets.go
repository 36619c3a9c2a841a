package workload

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Peer system names the target table compares raftq with (the names
// `make bench-peers` gives them).
const (
	PeerNATSSync = "nats-sync"
	PeerNATS     = "nats"
	PeerRabbitMQ = "rabbitmq"
)

// TargetRow is one row of issue 15's target table, filled from one run.
type TargetRow struct {
	// Base is the system whose figures are divided (raftq-3, ...).
	Base   string `json:"base"`
	Figure string `json:"figure"`
	// Now is the figure this run measured: a ratio (×) or seconds; 0 when
	// NotRun says why it was not measured.
	Now  float64 `json:"now,omitempty"`
	Unit string  `json:"unit"`
	// Goal and AtLeast make the target: Now >= Goal (AtLeast) or Now <=
	// Goal.
	Goal    float64 `json:"goal"`
	AtLeast bool    `json:"at_least"`
	Met     bool    `json:"met"`
	// Detail shows what the ratio divides ("14141 / 41506 msgs/s").
	Detail string `json:"detail,omitempty"`
	NotRun string `json:"not_run,omitempty"`
}

// Target is the goal as the issue writes it ("≥ 1.0×", "≤ 5 s").
func (r TargetRow) Target() string {
	op := "≤"
	if r.AtLeast {
		op = "≥"
	}
	return fmt.Sprintf("%s %s", op, fmtUnit(r.Goal, r.Unit))
}

func fmtUnit(v float64, unit string) string {
	if unit == "s" {
		return fmt.Sprintf("%.1f s", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

// targetFigure reads one figure of one system; ok is false (with the
// reason) when the system, the phase or the figure is missing.
type targetFigure struct {
	client, phase, what string
	get                 func(*PhaseResult) float64
}

func (f targetFigure) of(systems []SystemResult, name string) (float64, string) {
	var s *SystemResult
	for i := range systems {
		if systems[i].System == name {
			s = &systems[i]
		}
	}
	switch {
	case s == nil:
		return 0, name + " not in -systems"
	case s.Error != "" && len(s.Phases) == 0:
		return 0, name + " did not run"
	}
	p := s.Phase(f.client, f.phase)
	if p == nil {
		return 0, fmt.Sprintf("%s has no %s %s phase", name, f.client, f.phase)
	}
	if p.Aborted {
		return 0, fmt.Sprintf("%s %s %s failed", name, f.client, f.phase)
	}
	v := f.get(p)
	if v <= 0 {
		return 0, fmt.Sprintf("%s %s %s measured no %s", name, f.client, f.phase, f.what)
	}
	return v, ""
}

// ratioSpec is a target row that divides base's figure by a peer's.
type ratioSpec struct {
	figure  string
	peer    string
	fig     targetFigure
	unit    string // shown after both values in the detail
	goal    float64
	atLeast bool
}

var ratioSpecs = []ratioSpec{
	{"one-message unary enqueue vs NATS sync_interval: always", PeerNATSSync,
		targetFigure{ClientUnary, PhaseEnqueue, "rate", rate}, "msgs/s", 1.0, true},
	{"one-message unary enqueue vs RabbitMQ QQ", PeerRabbitMQ,
		targetFigure{ClientUnary, PhaseEnqueue, "rate", rate}, "msgs/s", 1.5, true},
	{"one synchronous enqueue, p50 latency vs NATS sync_interval: always", PeerNATSSync,
		targetFigure{ClientUnary, PhaseEnqueueSync, "latency", p50}, "ms", 1.0, false},
	{"send → delivery p50 at paced rate vs NATS sync_interval: always", PeerNATSSync,
		targetFigure{ClientUnary, PhasePaced, "end-to-end latency", e2eP50}, "ms", 1.0, false},
	{"lifecycle with unary acks (deliveries/s) vs NATS sync_interval: always", PeerNATSSync,
		targetFigure{ClientUnary, PhaseLifecycle, "delivery rate", delivRate}, "msgs/s", 1.0, true},
	{"batched enqueue vs NATS default sync (which does not fsync)", PeerNATS,
		targetFigure{ClientBatch, PhaseEnqueue, "rate", rate}, "msgs/s", 1.0, true},
	{"enqueue (SDK) vs nats-sync", PeerNATSSync,
		targetFigure{ClientSDK, PhaseEnqueue, "rate", rate}, "msgs/s", 1.0, true},
	{"enqueue (SDK) p99 at half of peak vs nats-sync", PeerNATSSync,
		targetFigure{ClientSDK, PhaseEnqueueHalf, "latency", p99}, "ms", 1.0, false},
}

// Memory target rows; they come from the memory mode (one raftq node).
const (
	TargetRSS      = "RSS with the memory-mode backlog queued, per payload byte"
	TargetRestart  = "restart after kill -9 with the memory-mode backlog, to all messages visible"
	TargetSnapshot = "client p99 while the memory-mode snapshot is written, vs the same load without"
)

// Targets computes issue 15's target table from one run: base's figures
// (normally raftq-3) over the peers' from systems, and the memory-mode
// figures from mem. memNotRun, if mem is nil, says why the memory mode did
// not run; a row that could not be measured says why in NotRun.
func Targets(systems []SystemResult, base string, mem *MemoryResult, memNotRun string) []TargetRow {
	var rows []TargetRow
	for _, sp := range ratioSpecs {
		r := TargetRow{Base: base, Figure: sp.figure, Unit: "×", Goal: sp.goal, AtLeast: sp.atLeast}
		bv, bwhy := sp.fig.of(systems, base)
		pv, pwhy := sp.fig.of(systems, sp.peer)
		switch {
		case bwhy != "":
			r.NotRun = bwhy
		case pwhy != "":
			r.NotRun = pwhy
		default:
			r.Now = bv / pv
			r.Detail = fmt.Sprintf("%s / %s %s", fmtValue(bv, sp.unit), fmtValue(pv, sp.unit), sp.unit)
			r.Met = meets(r.Now, r.Goal, r.AtLeast)
		}
		rows = append(rows, r)
	}
	rss := TargetRow{Base: base, Figure: TargetRSS, Unit: "×", Goal: 1.5}
	restart := TargetRow{Base: base, Figure: TargetRestart, Unit: "s", Goal: 5}
	snap := TargetRow{Base: base, Figure: TargetSnapshot, Unit: "×", Goal: 2}
	memRows := []*TargetRow{&rss, &restart, &snap}
	switch {
	case mem == nil:
		if memNotRun == "" {
			memNotRun = "memory mode not run"
		}
		for _, r := range memRows {
			r.NotRun = memNotRun
		}
	case mem.Error != "":
		for _, r := range memRows {
			r.NotRun = "memory mode failed: " + mem.Error
		}
	default:
		shape := fmt.Sprintf("%d × %d B, 1 plain node", mem.Messages, mem.PayloadSize)
		if mem.RSSBytes > 0 && mem.PayloadBytes > 0 {
			rss.Now = float64(mem.RSSBytes) / float64(mem.PayloadBytes)
			rss.Detail = fmt.Sprintf("%.0f MiB / %.0f MiB (%s; %d headers + dedup id each, read %.0f s after the last enqueue)",
				float64(mem.RSSBytes)/(1<<20), float64(mem.PayloadBytes)/(1<<20), shape, mem.Headers, mem.SettleSecs)
		} else {
			rss.NotRun = "no RSS reading"
		}
		if mem.RestartReadySecs > 0 {
			restart.Now = mem.RestartReadySecs
			restart.Detail = fmt.Sprintf("first answer %.2f s (%s)", mem.RestartAnswerSecs, shape)
		} else {
			restart.NotRun = "no restart reading"
		}
		if mem.TrickleSnapshot.Count > 0 && mem.TrickleBaseline.P99 > 0 {
			snap.Now = mem.TrickleSnapshot.P99 / mem.TrickleBaseline.P99
			snap.Detail = fmt.Sprintf("%.1f / %.1f ms p99, %.0f enqueues/s, snapshot %.1f s", mem.TrickleSnapshot.P99, mem.TrickleBaseline.P99, mem.TrickleRate, mem.SnapshotSecs)
		} else {
			snap.NotRun = "no call overlapped the snapshot, or no baseline"
		}
		for _, r := range memRows {
			if r.NotRun == "" {
				r.Met = meets(r.Now, r.Goal, r.AtLeast)
			}
		}
	}
	return append(rows, rss, restart, snap)
}

func meets(v, goal float64, atLeast bool) bool {
	if atLeast {
		return v >= goal
	}
	return v <= goal
}

func fmtValue(v float64, unit string) string {
	if unit == "msgs/s" {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteTargets prints the target table: figure, now, target, met, and
// what the ratio divides.
func WriteTargets(w io.Writer, base string, rows []TargetRow) error {
	fmt.Fprintf(w, "issue 15 targets (%s against the peers, this run):\n", base)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tnow\ttarget\tmet\tmeasured")
	for _, r := range rows {
		if r.NotRun != "" {
			fmt.Fprintf(tw, "%s\t-\t%s\tnot run (%s)\t\n", r.Figure, r.Target(), r.NotRun)
			continue
		}
		met := "no"
		if r.Met {
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Figure, fmtUnit(r.Now, r.Unit), r.Target(), met, r.Detail)
	}
	return tw.Flush()
}

// WriteTargetsMarkdown prints the target table as a Markdown table (for
// docs/benchmarks.md).
func WriteTargetsMarkdown(w io.Writer, rows []TargetRow) {
	fmt.Fprintln(w, "| figure | now | target | met | measured |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		if r.NotRun != "" {
			fmt.Fprintf(w, "| %s | - | %s | not run (%s) | |\n", r.Figure, r.Target(), strings.ReplaceAll(r.NotRun, "|", "/"))
			continue
		}
		met := "no"
		if r.Met {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.Figure, fmtUnit(r.Now, r.Unit), r.Target(), met, r.Detail)
	}
}
