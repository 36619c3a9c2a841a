package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestJudgeSoak: flat figures pass, a resource past its bound fails naming
// it, and a node never sampled at the end fails too.
func TestJudgeSoak(t *testing.T) {
	base := Resources{Node: "n1", Phase: soakPhaseStart, OK: true, RSSBytes: 100 << 20, OpenFiles: 40, Goroutines: 200, LogBytes: 10 << 20, DataBytes: 20 << 20}
	end := base
	end.Phase = soakPhaseEnd
	end.Goroutines = 300 + goroutineSlack // exactly the bound
	base.Pid, end.Pid = 100, 200
	if v := JudgeSoak([]Resources{base, end}, nil); !v.OK() || !strings.Contains(v.Table(), "restarted since start") || !strings.Contains(v.Table(), "flat:") {
		t.Fatalf("at the bound: %v %v\n%s", v.Growths, v.Missing, v.Table())
	}
	for _, tc := range []struct {
		what string
		grow func(r *Resources)
	}{
		{"goroutines", func(r *Resources) { r.Goroutines = 301 + goroutineSlack }},
		{"open files", func(r *Resources) { r.OpenFiles = 61 + openFileSlack }},
		{"Raft log", func(r *Resources) { r.LogBytes = 15<<20 + logSlackBytes + 1 }},
		{"data dir", func(r *Resources) { r.DataBytes = 30<<20 + dataSlackBytes + 1 }},
	} {
		e := base
		e.Phase = soakPhaseEnd
		tc.grow(&e)
		v := JudgeSoak([]Resources{base, e}, nil)
		if v.OK() || len(v.Growths) != 1 || !strings.Contains(v.Growths[0], tc.what) {
			t.Errorf("%s grown: %v", tc.what, v.Growths)
		}
		if got := v.Violations(); len(got) != 1 || got[0].Invariant != InvResourceGrowth {
			t.Errorf("%s grown: violations %v", tc.what, got)
		}
	}
	missing := end
	missing.OK, missing.Err = false, "paused"
	if v := JudgeSoak([]Resources{base, missing}, nil); v.OK() || len(v.Missing) != 1 {
		t.Fatalf("no end sample: %v", v.Missing)
	}
}

// rssSeries is a synthetic node series: a sample every soakEvery for
// span from base, RSS (MiB) as rss(minutes since base, minutes since the
// process started), a new process at each restart minute.
func rssSeries(base time.Time, span time.Duration, restarts []float64, rss func(t, age float64) float64) (start Resources, series []Resources) {
	pid, born := 100, 0.0
	for at := time.Duration(0); at <= span; at += soakEvery {
		m := at.Minutes()
		if len(restarts) > 0 && m >= restarts[0] {
			pid, born, restarts = pid+1, restarts[0], restarts[1:]
		}
		// A little deterministic noise: the GC's sawtooth.
		noise := float64(int(m*4)%3-1) * 6
		series = append(series, Resources{Node: "n1", Phase: soakPhaseRun, OK: true, At: base.Add(at), Pid: pid,
			RSSBytes: int64((rss(m, m-born) + noise) * (1 << 20))})
	}
	start = series[0]
	start.Phase = soakPhaseStart
	return start, series
}

// TestJudgeSoakRSS feeds the RSS judge plateaus (pass) and leaks (fail):
// a process that settles at a level and restarted processes that climb
// back to it pass; a process that keeps growing after it settled, a level
// that climbs from process to process, and a process that never settles
// fail.
func TestJudgeSoakRSS(t *testing.T) {
	base := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	const span = 32 * time.Minute
	// warm climbs from 100 MiB to level over the process's first 2 minutes.
	warm := func(level, age float64) float64 {
		if age < 2 {
			return 100 + (level-100)*age/2
		}
		return level
	}
	restarts := []float64{4, 7.5, 11, 14, 17.5, 21, 24.5, 28}
	for _, tc := range []struct {
		name     string
		restarts []float64
		rss      func(t, age float64) float64
		want     string // "" passes; else the violation names it
	}{
		{"plateau", nil, func(t, _ float64) float64 { return 420 }, ""},
		{"plateau reached after the baseline", nil, func(t, _ float64) float64 { return 240 + 180*min(t, 8)/8 }, ""},
		{"restarted nodes climb back to the plateau", restarts, func(_, age float64) float64 { return warm(420, age) }, ""},
		{"the last run's figures: 241, 463, 420", []float64{9, 20}, func(t, age float64) float64 {
			if t < 9 {
				return 241 + 222*min(t, 6)/6
			}
			return warm(420, age)
		}, ""},
		{"leak in one process", nil, func(t, _ float64) float64 { return 300 + 4*t }, "grows by"},
		{"spikes (a snapshot, a catch-up) in the second half", nil, func(t, _ float64) float64 {
			if t > 16 && int(t*4)%17 == 0 {
				return 800
			}
			return 420
		}, ""},
		{"short-lived processes on a plateau (trend not judged)", []float64{2, 3.5, 5, 7, 8.5, 10, 12, 13.5, 15, 17, 18.5, 20, 22, 23.5, 25, 27, 28.5, 30}, func(_, age float64) float64 {
			return warm(420, age)
		}, ""},
		{"leak in a settled restarted process", []float64{14}, func(t, age float64) float64 {
			return warm(300, age) + 6*max(age-2, 0)
		}, "grows by"},
		{"level climbs from process to process", restarts, func(t, age float64) float64 { return warm(200+15*t, age) }, "climbed"},
		{"a restarted process never settles", []float64{1}, func(t, age float64) float64 { return 100 + 200*age }, "RSS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, series := rssSeries(base, span, tc.restarts, tc.rss)
			j, growth, missing := judgeRSS("n1", series, start, series[len(series)-1].At)
			if missing != "" {
				t.Fatalf("not judged: %s (%+v)", missing, j)
			}
			if strings.Contains(tc.name, "trend not judged") && j.TrendJudged {
				t.Errorf("trend judged %v (%+v)", j.TrendJudged, j)
			}
			switch {
			case tc.want == "" && growth != "":
				t.Errorf("a plateau fails: %s (%+v)", growth, j)
			case tc.want != "" && !strings.Contains(growth, tc.want):
				t.Errorf("a leak: got %q, want it to say %q (%+v)", growth, tc.want, j)
			}
		})
	}
	// No settled sample in the second half: not judged, which fails.
	start, series := rssSeries(base, span, nil, func(float64, float64) float64 { return 400 })
	for i := len(series) / 2; i < len(series); i++ {
		series[i].OK = false
	}
	if _, _, missing := judgeRSS("n1", series, start, series[len(series)-1].At); missing == "" {
		t.Error("a series that stops half way is judged")
	}
	start, series = rssSeries(base, span, nil, func(float64, float64) float64 { return 400 })
	v := JudgeSoak([]Resources{start, {Node: "n1", Phase: soakPhaseEnd, OK: true, Pid: 100, At: series[len(series)-1].At}}, series)
	if !v.OK() || len(v.RSS) != 1 || !strings.Contains(v.Table(), "second-half p90") {
		t.Errorf("a flat soak: %v %v\n%s", v.Growths, v.Missing, v.Table())
	}
}

// TestBaselineSteady: the baseline waits until every node's current
// process has set no new high, in RSS, state or backlog, over the last
// steadyWindow samples; a window that is merely narrow (a slow climb, the
// seed 51238347756 warm-up that the first rule took for steady at 1m48s)
// is not enough.
func TestBaselineSteady(t *testing.T) {
	at := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	mk := func(rss, snap []int64, pids ...int) []Resources {
		var out []Resources
		for i := range rss {
			pid := 7
			if i < len(pids) {
				pid = pids[i]
			}
			out = append(out, Resources{Node: "n1", Phase: soakPhaseRun, OK: true, At: at.Add(time.Duration(i) * soakEvery), Pid: pid,
				RSSBytes: rss[i] << 20, SnapshotBytes: snap[i] << 20, StateBytes: 1 << 20})
		}
		return out
	}
	flat := []int64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5}
	for _, tc := range []struct {
		name       string
		series     []Resources
		want       bool
		wantReason string
	}{
		{"plateau", mk([]int64{100, 300, 400, 410, 405, 412, 400, 411, 409, 414}, flat), true, ""},
		{"slow climb, narrow windows", mk([]int64{250, 260, 270, 280, 290, 300, 310, 320, 330, 340}, flat), false, "RSS"},
		{"state climbing (recent outcomes filling)", mk([]int64{400, 400, 400, 400, 400, 400, 400, 400, 400, 400}, []int64{1, 1, 2, 2, 3, 3, 4, 4, 5, 5}), false, "state"},
		{"restarted: its own samples only", mk([]int64{400, 400, 400, 400, 400, 400, 400, 400, 400, 400}, flat, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2), false, "samples of its process"},
		{"too few", mk([]int64{400, 400}, []int64{8, 8}), false, "samples"},
	} {
		ok, why := BaselineSteady(tc.series, []string{"n1"})
		if ok != tc.want || !strings.Contains(why, tc.wantReason) {
			t.Errorf("%s: %v %q", tc.name, ok, why)
		}
	}
}

// TestParseMetrics reads the sample's figures from a /metrics page.
func TestParseMetrics(t *testing.T) {
	page := `# HELP go_goroutines Number of goroutines that currently exist.
go_goroutines 212
go_memstats_heap_inuse_bytes 1.2582912e+08
go_memstats_sys_bytes 2.5e+08
raftq_queue_bytes{queue="a"} 1000
raftq_queue_bytes{queue="b"} 24
raftq_queue_messages{queue="a",state="ready"} 3
raftq_queue_messages{queue="a",state="in_flight"} 4
`
	var r Resources
	if err := parseMetrics(page, &r); err != nil {
		t.Fatal(err)
	}
	if r.Goroutines != 212 || r.HeapInuse != 125829120 || r.GoSys != 250000000 || r.StateBytes != 1024 || r.StateMsgs != 7 {
		t.Fatalf("%+v", r)
	}
	if err := parseMetrics("up 1\n", &r); err == nil {
		t.Fatal("a page without go_goroutines parses")
	}
}
