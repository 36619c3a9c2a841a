package workload

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Machine describes where the figures were taken.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	MemBytes int64  `json:"mem_bytes,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	Go       string `json:"go"`
	// Fsync is the latency of a 4 KiB append + fdatasync in the temp
	// directory, where the brokers keep their data.
	Fsync *LatencySummary `json:"fsync,omitempty"`
}

// MemoryResult is the issue-2 figures of one raftq node: memory held by a
// large backlog, the Apply stall a snapshot causes, and restart time.
type MemoryResult struct {
	Messages    int64   `json:"messages"`
	PayloadSize int     `json:"payload_size"`
	EnqueueSecs float64 `json:"enqueue_seconds"`
	EnqueueRate float64 `json:"enqueue_msgs_per_sec"`
	// FillCPUSecs is the node's CPU time (user + system) during the fill:
	// per message, the enqueue cost a loaded machine's wait for a core
	// does not stretch, to compare builds by (issue 24: without slowing
	// enqueue).
	FillCPUSecs float64 `json:"fill_cpu_seconds,omitempty"`
	// RSSBytes is VmRSS SettleSecs after the last enqueue (issue 24's
	// figure); RSSAtFillBytes right after it. Headers per message.
	RSSBytes       int64   `json:"rss_bytes"`
	RSSAtFillBytes int64   `json:"rss_at_fill_bytes"`
	SettleSecs     float64 `json:"settle_seconds"`
	Headers        int     `json:"headers"`
	PayloadBytes   int64   `json:"payload_bytes"`
	// Snapshot: how long the Snapshot RPC took, and the latency of a
	// steady trickle of enqueues before and while it ran.
	SnapshotSecs    float64        `json:"snapshot_seconds"`
	SnapshotBytes   int64          `json:"snapshot_dir_bytes"`
	TrickleRate     float64        `json:"trickle_per_sec"`
	TrickleBaseline LatencySummary `json:"trickle_baseline_latency"`
	TrickleSnapshot LatencySummary `json:"trickle_during_snapshot_latency"`
	// SnapshotOtherCores is the CPU the rest of the machine used while the
	// snapshot ran (cores; -1 if unknown): above ~0.1 the stall figures
	// are disturbed.
	SnapshotOtherCores float64 `json:"snapshot_other_cores"`
	RSSAfterSnapshot   int64   `json:"rss_after_snapshot_bytes"`
	// Restart after kill -9: until the gRPC API answers at all, and until
	// GetQueue shows every message.
	RestartAnswerSecs float64 `json:"restart_first_answer_seconds"`
	RestartReadySecs  float64 `json:"restart_all_messages_seconds"`
	RSSAfterRestart   int64   `json:"rss_after_restart_bytes"`
	// RestartCPUSecs is the restarted node's CPU time when every message
	// was visible (0 if unknown): what the restart cost, whatever the
	// machine's load made of its wall time.
	RestartCPUSecs float64 `json:"restart_cpu_seconds,omitempty"`
	Expected       int64   `json:"expected_messages"`
	Found          int64   `json:"found_messages"`
	Error          string  `json:"error,omitempty"`
}

// ProfileEntry is one line of a flat CPU profile.
type ProfileEntry struct {
	Percent float64 `json:"percent"`
	Symbol  string  `json:"symbol"`
}

// Profile is a CPU profile of one server process during one phase.
type Profile struct {
	System  string         `json:"system"`
	Process string         `json:"process"`
	Phase   string         `json:"phase"`
	Tool    string         `json:"tool"`
	File    string         `json:"file,omitempty"`
	Top     []ProfileEntry `json:"top"`
	// TopRaftq is the cumulative (self + callees) share of raftq's own
	// functions.
	TopRaftq []ProfileEntry `json:"top_raftq_cumulative,omitempty"`
	Error    string         `json:"error,omitempty"`
}

// Report is everything one invocation measured; it is what -json writes.
type Report struct {
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	Git     string    `json:"git,omitempty"`
	// RaftqBuild is the raftq binary's VCS stamp (revision, modified)
	// when it has one.
	RaftqBuild string  `json:"raftq_build,omitempty"`
	Machine    Machine `json:"machine"`
	// LoadAvg is /proc/loadavg (1, 5, 15 min) when the run started and
	// when it ended: other work on the machine skews every figure.
	LoadAvg  []string        `json:"load_avg,omitempty"`
	Config   Config          `json:"config"`
	Systems  []SystemResult  `json:"systems,omitempty"`
	Memory   *MemoryResult   `json:"memory,omitempty"`
	Throttle *ThrottleResult `json:"throttle,omitempty"`
	Restart  *RestartResult  `json:"restart,omitempty"`
	Profiles []Profile       `json:"profiles,omitempty"`
	// Targets is issue 15's target table, computed from this run.
	Targets []TargetRow `json:"targets,omitempty"`
}

// WriteJSON writes r, indented, to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func num(v float64, prec int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func lat(s *LatencySummary, f func(*LatencySummary) float64) string {
	if s == nil || s.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", f(s))
}

func cpuCell(ps []ProcCPU) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %.1f (%.2f)", p.Name, p.Seconds, p.Cores))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// WriteTable prints one row per phase of every system, then each system's
// exactly-once verdict, notes and errors.
func WriteTable(w io.Writer, systems []SystemResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tclient\tphase\tmessages\tmsgs/s\tp50 ms\tp99 ms\tp999 ms\tdeliv/s\tentries/msg\te2e p50\te2e p99\terrors\t\tserver CPU s (cores)\tbench CPU s (cores)\tother CPU\t")
	for _, s := range systems {
		if s.Error != "" && len(s.Phases) == 0 {
			fmt.Fprintf(tw, "%s\t\t(not run)\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", s.System)
			continue
		}
		for _, p := range s.Phases {
			e2e := p.EndToEnd
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\t%s\t%s\t%.2f\t\n",
				s.System, p.Client, p.Name, p.Messages, num(p.Rate, 0),
				lat(p.Latency, func(l *LatencySummary) float64 { return l.P50 }),
				lat(p.Latency, func(l *LatencySummary) float64 { return l.P99 }),
				lat(p.Latency, func(l *LatencySummary) float64 { return l.P999 }),
				num(p.DeliveryRate, 0), num(p.EntriesPerMessage, 3),
				lat(e2e, func(l *LatencySummary) float64 { return l.P50 }),
				lat(e2e, func(l *LatencySummary) float64 { return l.P99 }),
				p.Errors, cpuCell(p.ServerCPU), cpuCell([]ProcCPU{p.ClientCPU}), p.OtherCPU.Cores)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range systems {
		if s.Check != nil {
			fmt.Fprintf(w, "%s: %s\n", s.System, s.Check)
			for _, e := range s.Check.Examples {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
		for _, p := range s.Phases {
			if p.FirstError != "" {
				fmt.Fprintf(w, "%s %s %s: %d errors, first: %s\n", s.System, p.Client, p.Name, p.Errors, p.FirstError)
			}
		}
		if s.Error != "" {
			fmt.Fprintf(w, "%s: NOT RUN OR FAILED: %s\n", s.System, s.Error)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "%s: note: %s\n", s.System, n)
		}
		for _, k := range ClientKinds {
			if same, ok := s.SameClient[k]; ok {
				fmt.Fprintf(w, "%s: note: its %s client is its %s client; the %s figures are those\n", s.System, k, same, same)
			}
		}
	}
	return nil
}

// comparisonRow is one figure the comparison table puts side by side;
// higher is better for rates, lower for latencies.
type comparisonRow struct {
	client, phase, label string
	higher               bool
	get                  func(*PhaseResult) float64
}

func rate(p *PhaseResult) float64       { return p.Rate }
func delivRate(p *PhaseResult) float64  { return p.DeliveryRate }
func entriesPer(p *PhaseResult) float64 { return p.EntriesPerMessage }
func p50(p *PhaseResult) float64        { return latOf(p.Latency).P50 }
func p99(p *PhaseResult) float64        { return latOf(p.Latency).P99 }
func e2eP50(p *PhaseResult) float64     { return latOf(p.EndToEnd).P50 }
func e2eP99(p *PhaseResult) float64     { return latOf(p.EndToEnd).P99 }

// serverUs and clientUs split a phase's CPU per message (µs): every
// server process together, and the load generator (issue 24: with the
// servers and the generator on separate cores, RAFTQ_BENCH_NODE_CPUS,
// each side's cost is its own).
func serverUs(p *PhaseResult) float64 {
	var cpu float64
	for _, c := range p.ServerCPU {
		cpu += c.Seconds
	}
	return perMessageUs(p, cpu)
}

func clientUs(p *PhaseResult) float64 { return perMessageUs(p, p.ClientCPU.Seconds) }

func perMessageUs(p *PhaseResult, seconds float64) float64 {
	if p.Messages == 0 {
		return 0
	}
	return seconds / float64(p.Messages) * 1e6
}

// comparisonRows are the rows of every client kind, then the servers' CPU.
var comparisonRows = func() []comparisonRow {
	var rows []comparisonRow
	for _, k := range ClientKinds {
		add := func(phase, label string, higher bool, get func(*PhaseResult) float64) {
			rows = append(rows, comparisonRow{k, phase, k + " " + label, higher, get})
		}
		add(PhaseEnqueue, "enqueue msgs/s", true, rate)
		add(PhaseEnqueue, "enqueue p99 ms", false, p99)
		add(PhaseEnqueue, "enqueue server CPU us/msg", false, serverUs)
		add(PhaseEnqueue, "enqueue client CPU us/msg", false, clientUs)
		add(PhaseEnqueueHalf, "enqueue @50% p50 ms", false, p50)
		add(PhaseEnqueueHalf, "enqueue @50% p99 ms", false, p99)
		add(PhaseEnqueueSync, "enqueue-sync msgs/s", true, rate)
		add(PhaseEnqueueSync, "enqueue-sync p50 ms", false, p50)
		add(PhaseDrain, "drain msgs/s", true, rate)
		add(PhaseDrain, "drain server CPU us/msg", false, serverUs)
		add(PhaseDrain, "drain client CPU us/msg", false, clientUs)
		add(PhaseLifecycle, "lifecycle enqueue msgs/s", true, rate)
		add(PhaseLifecycle, "lifecycle deliveries/s", true, delivRate)
		add(PhaseLifecycle, "lifecycle log entries / delivery", false, entriesPer)
		add(PhaseLifecycle, "lifecycle e2e p50 ms", false, e2eP50)
		add(PhaseLifecycle, "lifecycle e2e p99 ms", false, e2eP99)
		add(PhasePaced, "paced e2e p50 ms", false, e2eP50)
		add(PhasePaced, "paced e2e p99 ms", false, e2eP99)
	}
	return append(rows, comparisonRow{"", "", "server CPU s / 1k msgs", false, nil})
}()

func latOf(l *LatencySummary) LatencySummary {
	if l == nil {
		return LatencySummary{}
	}
	return *l
}

// serverCPUPerK is the servers' CPU seconds per thousand messages moved
// over all phases: enqueued, plus delivered.
func serverCPUPerK(s *SystemResult) float64 {
	var cpu float64
	var msgs int64
	for _, p := range s.Phases {
		for _, c := range p.ServerCPU {
			cpu += c.Seconds
		}
		msgs += p.Messages
		if p.Name == PhaseLifecycle {
			msgs += p.Deliveries
		}
	}
	if msgs == 0 {
		return 0
	}
	return cpu / float64(msgs) * 1000
}

// WriteComparison prints the systems side by side with, for every other
// system, the ratio base/other (so >1 means base moved more messages per
// second, or took longer for a latency row).
func WriteComparison(w io.Writer, systems []SystemResult, base string) error {
	var b *SystemResult
	for i := range systems {
		if systems[i].System == base {
			b = &systems[i]
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "figure\t")
	for _, s := range systems {
		fmt.Fprintf(tw, "%s\t", s.System)
	}
	if b != nil {
		for _, s := range systems {
			if s.System != base {
				fmt.Fprintf(tw, "%s/%s\t", base, s.System)
			}
		}
	}
	fmt.Fprintln(tw)
	value := func(s *SystemResult, i int) float64 {
		row := comparisonRows[i]
		if row.phase == "" {
			return serverCPUPerK(s)
		}
		if s.Error != "" && len(s.Phases) == 0 {
			return 0
		}
		p := s.Phase(row.client, row.phase)
		if p == nil {
			return 0
		}
		return row.get(p)
	}
	for i, row := range comparisonRows {
		measured := false
		for j := range systems {
			measured = measured || value(&systems[j], i) != 0
		}
		if !measured {
			continue // a client kind or phase this run did not have
		}
		fmt.Fprintf(tw, "%s\t", row.label)
		for j := range systems {
			prec := 1
			if row.higher {
				prec = 0
			}
			if row.phase == "" || strings.Contains(row.label, "entries") {
				prec = 3
			}
			fmt.Fprintf(tw, "%s\t", num(value(&systems[j], i), prec))
		}
		if b != nil {
			bv := value(b, i)
			for j := range systems {
				if systems[j].System == base {
					continue
				}
				ov := value(&systems[j], i)
				if bv == 0 || ov == 0 {
					fmt.Fprint(tw, "-\t")
					continue
				}
				fmt.Fprintf(tw, "%.2fx\t", bv/ov)
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteMemory prints the issue-2 figures.
func WriteMemory(w io.Writer, m *MemoryResult) {
	mib := func(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "memory: %d messages of %d B enqueued in %.1fs (%.0f msgs/s)", m.Messages, m.PayloadSize, m.EnqueueSecs, m.EnqueueRate)
	if m.FillCPUSecs > 0 {
		fmt.Fprintf(w, ", node CPU %.2fs (%.1f us/msg)", m.FillCPUSecs, m.FillCPUSecs*1e6/float64(max(m.Messages, 1)))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "memory: VmRSS %s for %s of payload (%.2fx) %.0fs after the last enqueue (%s right after it); %d headers and a dedup id per message\n",
		mib(m.RSSBytes), mib(m.PayloadBytes), float64(m.RSSBytes)/float64(max(m.PayloadBytes, 1)), m.SettleSecs, mib(m.RSSAtFillBytes), m.Headers)
	other := "unknown"
	if m.SnapshotOtherCores >= 0 {
		other = fmt.Sprintf("%.2f cores", m.SnapshotOtherCores)
	}
	fmt.Fprintf(w, "snapshot: took %.2fs, snapshot dir %s, VmRSS after %s, other CPU during it %s\n", m.SnapshotSecs, mib(m.SnapshotBytes), mib(m.RSSAfterSnapshot), other)
	fmt.Fprintf(w, "snapshot: trickle of %.0f enqueues/s: before p50 %.1f / p99 %.1f / max %.1f ms; during snapshot p50 %.1f / p99 %.1f / max %.1f ms (%d calls)\n",
		m.TrickleRate, m.TrickleBaseline.P50, m.TrickleBaseline.P99, m.TrickleBaseline.Max,
		m.TrickleSnapshot.P50, m.TrickleSnapshot.P99, m.TrickleSnapshot.Max, m.TrickleSnapshot.Count)
	fmt.Fprintf(w, "restart after kill -9: first answer after %.2fs, all %d messages visible after %.2fs (found %d), VmRSS %s, node CPU %.2fs\n",
		m.RestartAnswerSecs, m.Expected, m.RestartReadySecs, m.Found, mib(m.RSSAfterRestart), m.RestartCPUSecs)
	if m.Error != "" {
		fmt.Fprintf(w, "memory: FAILED: %s\n", m.Error)
	}
}

// WriteProfile prints a profile's top entries.
func WriteProfile(w io.Writer, p Profile) {
	fmt.Fprintf(w, "CPU profile of %s %s during %s (%s", p.System, p.Process, p.Phase, p.Tool)
	if p.File != "" {
		fmt.Fprintf(w, ", %s", p.File)
	}
	fmt.Fprintln(w, "):")
	if p.Error != "" {
		fmt.Fprintf(w, "  failed: %s\n", p.Error)
	}
	for _, e := range p.Top {
		fmt.Fprintf(w, "  %6.2f%%  %s\n", e.Percent, e.Symbol)
	}
	if len(p.TopRaftq) > 0 {
		fmt.Fprintln(w, "  raftq functions, cumulative (self + callees):")
		for _, e := range p.TopRaftq {
			fmt.Fprintf(w, "  %6.2f%%  %s\n", e.Percent, e.Symbol)
		}
	}
}
