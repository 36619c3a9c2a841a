package chaos

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The soak (make soak): the chaos campaign's mixed workload and faults for
// a long time on one cluster, with every node's resources sampled every
// soakEvery from a baseline taken once the workload without faults is
// steady; three samples are kept as phases (start, half way through the
// faults, and the end of the quiet phase: the cluster healed, the workload
// still running, so the end is under the same load as the baseline).
// Goroutines, open files, the Raft log and the data dir are flat when the
// end is at most growthFactor times the baseline plus a slack (below);
// RSS is judged on the series (judgeRSS, and test/chaos/DESIGN.md says
// why). A node that was restarted by a fault starts afresh (the table
// marks it), so for it the check says that it comes back to the level it
// had, not that one process leaks nothing; with every fault kind (rolling
// restarts included) every node restarts, so a within-process leak check
// runs the soak with RAFTQ_CHAOS_FAULTS naming kinds that restart nothing
// (e.g. pause,partition-leader,partition-split,partition-bridge,packet-loss,latency).

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
	Node       string    `json:"node"`
	Phase      string    `json:"phase"`
	At         time.Time `json:"at"`
	OK         bool      `json:"ok"` // sampled (a paused or stopped node is not)
	Err        string    `json:"err,omitempty"`
	Pid        int       `json:"pid"`
	RSSBytes   int64     `json:"rss_bytes"`  // /proc/PID/status VmRSS
	RSSAnon    int64     `json:"rss_anon"`   // its RssAnon (heap, race shadow, stacks)
	RSSFile    int64     `json:"rss_file"`   // its RssFile (the binary's pages, mapped files)
	OpenFiles  int       `json:"open_files"` // entries of /proc/PID/fd
	Goroutines int       `json:"goroutines"` // go_goroutines in /metrics
	LogBytes   int64     `json:"log_bytes"`  // the Raft log: data dir's wal/ and raft.db
	DataBytes  int64     `json:"data_bytes"` // the whole data dir (log, snapshots, ...)
	// What the RSS is made of, from /metrics: the Go heap in use
	// (go_memstats_heap_inuse_bytes), all the Go runtime holds from the
	// OS (go_memstats_sys_bytes; RSS above it is the race detector's
	// shadow and metadata and C allocations), and the replicated state
	// (the sum of raftq_queue_bytes and of raftq_queue_messages).
	HeapInuse  int64 `json:"heap_inuse_bytes"`
	GoSys      int64 `json:"go_sys_bytes"`
	StateBytes int64 `json:"state_bytes"`
	StateMsgs  int64 `json:"state_messages"`
	// SnapshotBytes is raftq_snapshot_last_bytes: the whole replicated
	// state as last snapshotted (messages, dedup ids, recent outcomes),
	// which the queue figures leave out.
	SnapshotBytes int64 `json:"snapshot_bytes"`
}

// parseMetrics reads r's /metrics figures from a Prometheus text page.
func parseMetrics(page string, r *Resources) error {
	var haveG bool
	r.StateBytes, r.StateMsgs = 0, 0
	for _, line := range strings.Split(page, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name, val := line[:i], line[i+1:]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		var dst *int64
		switch name {
		case "go_goroutines":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return fmt.Errorf("go_goroutines %q: %w", val, err)
			}
			r.Goroutines, haveG = int(f), true
			continue
		case "go_memstats_heap_inuse_bytes":
			dst = &r.HeapInuse
		case "go_memstats_sys_bytes":
			dst = &r.GoSys
		case "raftq_snapshot_last_bytes":
			dst = &r.SnapshotBytes
		case "raftq_queue_bytes":
			dst = &r.StateBytes
		case "raftq_queue_messages":
			dst = &r.StateMsgs
		default:
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("%s %q: %w", name, val, err)
		}
		if name == "raftq_queue_bytes" || name == "raftq_queue_messages" {
			*dst += int64(f)
		} else {
			*dst = int64(f)
		}
	}
	if !haveG {
		return errors.New("no go_goroutines in /metrics")
	}
	return nil
}

// The bounds of "flat". The factor is the 1.5× the value after
// warm-up; the slacks keep small baselines from failing on noise that is
// no leak: the Go heap's GC target and the scheduler's buffers move RSS by
// tens of MiB (rssSlackBytes, for the series' bounds), goroutines and files follow the number of streams and
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

// The RSS is judged on its own series, not start against end. A node's
// RSS (race-built, as every campaign node is) climbs for minutes after
// start while its Go heap (recent outcomes are kept 5 minutes, dedup ids
// 2) and the race detector's shadow of it reach their working size, and a
// node a fault restarts comes back small and climbs again; an end within
// 1.5× of a baseline taken a minute in says nothing either way. So the
// sampler records every node every soakEvery for the whole run, and the
// baseline is taken once every node's RSS, state and backlog have settled
// (steadyWindow samples in a row set no new high, settled; detected,
// bounded by RAFTQ_SOAK_WARMUP). Flat RSS is then two
// bounds, both of which a leak fails (TestJudgeSoakRSS): the plateau (the
// second half's 90th percentile at most rssPlateauFactor × the first
// half's plus rssSlackBytes: the level a node returns to, across
// restarts, does not climb; a restarted process warming up is below the
// level and moves no percentile, a rare spike is above it and moves none
// either), and the trend (the least-squares slope of the second half,
// within each process settled for trendMinSpan there, from its own steady
// point or steadyMaxAge, times the judged span, at most rssTrendFrac of
// its mean plus rssSlackBytes: no settled process grows steadily).
const (
	soakEvery        = 15 * time.Second
	steadyWindow     = 6
	steadyFrac       = 0.05
	steadyRSSSlack   = 8 << 20
	steadyStateSlack = 1 << 20
	steadySnapSlack  = 256 << 10
	steadyMaxAge     = 3 * time.Minute
	trendMinSpan     = 8 * time.Minute
	rssPlateauFactor = 1.25
	rssTrendFrac     = 0.10
	soakPhaseRun     = "run"
)

// settled reports whether one process's samples (time order) end in
// steadyWindow samples that set no new high: their maximum of f is at
// most steadyFrac above the maximum of every earlier sample, plus slack.
// A climb sets a new high in every window, a plateau's noise does not;
// a window alone (its spread) would take a slow climb for steady.
func settled(p []Resources, f func(Resources) int64, slack int64) bool {
	if len(p) <= steadyWindow {
		return false
	}
	var prev, last int64
	for i, s := range p {
		if i < len(p)-steadyWindow {
			prev = max(prev, f(s))
		} else {
			last = max(last, f(s))
		}
	}
	return last <= prev+int64(steadyFrac*float64(prev))+slack
}

func rssOf(r Resources) int64      { return r.RSSBytes }
func backlogOf(r Resources) int64  { return r.StateBytes }
func snapshotOf(r Resources) int64 { return r.SnapshotBytes }

// BaselineSteady reports whether the series (in time order) ends, for
// every node, with its current process settled (settled): in RSS, in the
// replicated state's size (the last snapshot: messages, dedup ids and
// recent outcomes) and in the backlog (queue bytes); else it says why not.
func BaselineSteady(series []Resources, nodes []string) (bool, string) {
	for _, n := range nodes {
		var p []Resources
		for _, s := range series {
			if s.Node != n || !s.OK {
				continue
			}
			if len(p) > 0 && p[0].Pid != s.Pid {
				p = p[:0] // restarted: its own samples only
			}
			p = append(p, s)
		}
		if len(p) <= steadyWindow {
			return false, fmt.Sprintf("%s: %d samples of its process", n, len(p))
		}
		for _, c := range []struct {
			what  string
			f     func(Resources) int64
			slack int64
		}{{"RSS", rssOf, steadyRSSSlack}, {"state", snapshotOf, steadySnapSlack}, {"backlog", backlogOf, steadyStateSlack}} {
			if !settled(p, c.f, c.slack) {
				return false, fmt.Sprintf("%s: %s still climbing (%s over the last %d samples)", n, c.what, mibs(c.f(p[len(p)-1])), steadyWindow)
			}
		}
	}
	return true, ""
}

// RSSJudgement is one node's RSS series, judged.
type RSSJudgement struct {
	Node      string `json:"node"`
	Samples   int    `json:"samples"`   // since the baseline
	Processes int    `json:"processes"` // processes seen since the baseline
	// FirstP90 and SecondP90 are the 90th percentiles of the RSS in the
	// first and second half of the run (every sample: a process warming
	// up after a restart is below its plateau and does not move them).
	FirstP90  int64 `json:"first_p90"`
	SecondP90 int64 `json:"second_p90"`
	// SlopePerMin is the within-process least-squares slope of the
	// second half's settled RSS, bytes per minute, over the processes
	// settled for trendMinSpan there; TrendJudged is false when none is.
	SlopePerMin float64       `json:"slope_per_min"`
	TrendJudged bool          `json:"trend_judged"`
	TrendBound  int64         `json:"trend_bound"` // the growth the slope may project over the span
	Trended     int           `json:"trended"`     // processes the slope is fitted over
	Span        time.Duration `json:"span"`
}

// p90 is the 90th percentile (nearest rank) of xs.
func p90(xs []int64) int64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return ys[(len(ys)*9+9)/10-1]
}

// judgeRSS judges one node's series (time order) from the baseline at
// base (the start sample) to end (the end sample's time).
func judgeRSS(node string, series []Resources, base Resources, end time.Time) (j RSSJudgement, growth, missing string) {
	j.Node = node
	j.Span = end.Sub(base.At)
	mid := base.At.Add(j.Span / 2)
	var procs [][]Resources
	var first, second []int64
	for _, s := range series {
		if s.Node != node || !s.OK || s.At.Before(base.At) || s.At.After(end) {
			continue
		}
		j.Samples++
		if s.At.Before(mid) {
			first = append(first, s.RSSBytes)
		} else {
			second = append(second, s.RSSBytes)
		}
		if len(procs) == 0 || procs[len(procs)-1][0].Pid != s.Pid {
			procs = append(procs, nil)
		}
		procs[len(procs)-1] = append(procs[len(procs)-1], s)
	}
	j.Processes = len(procs)
	if len(first) < steadyWindow || len(second) < steadyWindow {
		return j, "", fmt.Sprintf("%s: RSS not judged: %d samples in the run's first half, %d in its second", node, len(first), len(second))
	}
	j.FirstP90, j.SecondP90 = p90(first), p90(second)
	if bound := int64(rssPlateauFactor*float64(j.FirstP90)) + rssSlackBytes; j.SecondP90 > bound {
		growth = fmt.Sprintf("%s: RSS climbed from %s (90th percentile, first half) to %s in the second half, past the bound %s (%.2f× + %s)",
			node, mibs(j.FirstP90), mibs(j.SecondP90), mibs(bound), rssPlateauFactor, mibs(rssSlackBytes))
	}
	// The trend: each process from its settling point (the baseline's
	// process from the baseline), second half only, fitted about its own
	// means.
	var sxy, sxx, sum, n float64
	for _, p := range procs {
		from := len(p)
		if p[0].Pid == base.Pid {
			from = 0
		}
		for i := range p {
			if from < len(p) {
				break
			}
			if p[i].At.Sub(p[0].At) >= steadyMaxAge || settled(p[:i+1], rssOf, steadyRSSSlack) {
				from = i
			}
		}
		var sp []Resources
		for _, s := range p[from:] {
			if !s.At.Before(mid) {
				sp = append(sp, s)
			}
		}
		if len(sp) < 3 || sp[len(sp)-1].At.Sub(sp[0].At) < trendMinSpan {
			continue
		}
		j.Trended++
		var mt, my float64
		for _, s := range sp {
			mt += s.At.Sub(base.At).Minutes()
			my += float64(s.RSSBytes)
		}
		mt, my = mt/float64(len(sp)), my/float64(len(sp))
		for _, s := range sp {
			dt := s.At.Sub(base.At).Minutes() - mt
			sxy += dt * (float64(s.RSSBytes) - my)
			sxx += dt * dt
			sum, n = sum+float64(s.RSSBytes), n+1
		}
	}
	if sxx > 0 {
		j.TrendJudged = true
		j.SlopePerMin = sxy / sxx
		j.TrendBound = int64(rssTrendFrac*sum/n) + rssSlackBytes
		if proj := j.SlopePerMin * j.Span.Minutes(); proj > float64(j.TrendBound) && growth == "" {
			growth = fmt.Sprintf("%s: RSS grows by %s a minute within a settled process in the second half (%s over the run's %v), past %s (%.0f%% of its mean + %s)",
				node, mibs(int64(j.SlopePerMin)), mibs(int64(proj)), j.Span.Round(time.Minute), mibs(j.TrendBound), 100*rssTrendFrac, mibs(rssSlackBytes))
		}
	}
	return j, growth, ""
}

// SoakVerdict judges samples (any order) and renders them.
type SoakVerdict struct {
	Samples []Resources `json:"samples"`
	// Series are the periodic samples (soakEvery) from the warm-up on.
	Series []Resources    `json:"series,omitempty"`
	RSS    []RSSJudgement `json:"rss,omitempty"`
	// Baseline says whether the baseline was taken once steady, or why not.
	Baseline string `json:"baseline,omitempty"`
	// Growths are the resources that grew past their bound, one line each.
	Growths []string `json:"growths,omitempty"`
	// Missing are the nodes with no start or end sample.
	Missing []string `json:"missing,omitempty"`
}

// OK reports whether every node was sampled at start and end and nothing
// grew past its bound.
func (v *SoakVerdict) OK() bool { return len(v.Growths) == 0 && len(v.Missing) == 0 }

// JudgeSoak compares each node's end sample with its start sample for
// goroutines, files, the Raft log and the data dir, and judges its RSS on
// the series (judgeRSS). series may be nil only in tests of the rest.
func JudgeSoak(samples, series []Resources) *SoakVerdict {
	v := &SoakVerdict{Samples: samples, Series: series}
	slices.SortStableFunc(v.Series, func(a, b Resources) int { return a.At.Compare(b.At) })
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
		if series != nil {
			j, g, m := judgeRSS(n, v.Series, start, end.At)
			v.RSS = append(v.RSS, j)
			if g != "" {
				v.Growths = append(v.Growths, g)
			}
			if m != "" {
				v.Missing = append(v.Missing, m)
			}
		}
		check("goroutines", int64(start.Goroutines), int64(end.Goroutines), goroutineSlack, count)
		check("open files", int64(start.OpenFiles), int64(end.OpenFiles), openFileSlack, count)
		check("Raft log", start.LogBytes, end.LogBytes, logSlackBytes, mibs)
		check("data dir", start.DataBytes, end.DataBytes, dataSlackBytes, mibs)
	}
	return v
}

func mibs(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Table renders the samples per node and phase, how each node's RSS was
// judged, and the verdict.
func (v *SoakVerdict) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tphase\tpid\tRSS\tanon\tfile\tGo heap\tGo sys\tbacklog\tmessages\tsnapshot\tgoroutines\topen files\tRaft log\tdata dir\t")
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
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t(%s)\n", s.Node, s.Phase, s.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Node, s.Phase, s.Pid, mibs(s.RSSBytes),
			mibs(s.RSSAnon), mibs(s.RSSFile), mibs(s.HeapInuse), mibs(s.GoSys), mibs(s.StateBytes), s.StateMsgs, mibs(s.SnapshotBytes),
			s.Goroutines, s.OpenFiles, mibs(s.LogBytes), mibs(s.DataBytes), restarted)
	}
	tw.Flush()
	if v.Baseline != "" {
		fmt.Fprintf(&b, "baseline: %s\n", v.Baseline)
	}
	if len(v.RSS) > 0 {
		fmt.Fprintf(&b, "RSS series (every %v from the baseline; trend over processes settled for %v in the second half):\n", soakEvery, trendMinSpan)
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "node\tsamples\tprocesses\tfirst-half p90\tsecond-half p90\tplateau bound\ttrended\tslope/min\tprojected\ttrend bound\t")
		for _, j := range v.RSS {
			slope, proj, tb := "-", "(not judged)", "-"
			if j.TrendJudged {
				slope, proj, tb = mibs(int64(j.SlopePerMin)), mibs(int64(j.SlopePerMin*j.Span.Minutes())), mibs(j.TrendBound)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", j.Node, j.Samples, j.Processes, mibs(j.FirstP90), mibs(j.SecondP90),
				mibs(int64(rssPlateauFactor*float64(j.FirstP90))+rssSlackBytes), j.Trended, slope, proj, tb)
		}
		tw.Flush()
	}
	switch {
	case v.OK():
		fmt.Fprintf(&b, "flat: every node's RSS (p90) within %.2f× its first-half level + %s and without a trend past %.0f%% + %s; goroutines, files, log and data within %.1f× start + slack (goroutines %d, files %d, log %s, data %s)\n",
			rssPlateauFactor, mibs(rssSlackBytes), 100*rssTrendFrac, mibs(rssSlackBytes), growthFactor, goroutineSlack, openFileSlack, mibs(logSlackBytes), mibs(dataSlackBytes))
	default:
		for _, g := range append(v.Growths, v.Missing...) {
			fmt.Fprintf(&b, "NOT FLAT: %s\n", g)
		}
	}
	return b.String()
}
