package workload

import (
	"bytes"
	"math"
	"regexp"
	"strings"
	"testing"
)

// targetRun builds the systems of one bench-peers run from a few figures.
type peerFigures struct {
	unaryRate, syncP50, pacedP50, lifeDeliv, batchRate, sdkRate, sdkHalfP99 float64
}

func peerResult(name string, f peerFigures, sdkIsUnary bool) SystemResult {
	s := SystemResult{System: name, Nodes: 3, Phases: []PhaseResult{
		{Client: ClientUnary, Name: PhaseEnqueue, Rate: f.unaryRate},
		{Client: ClientUnary, Name: PhaseEnqueueHalf, Latency: &LatencySummary{Count: 10, P99: f.sdkHalfP99}},
		{Client: ClientUnary, Name: PhaseEnqueueSync, Latency: &LatencySummary{Count: 10, P50: f.syncP50}},
		{Client: ClientUnary, Name: PhaseLifecycle, Rate: 2 * f.lifeDeliv, DeliveryRate: f.lifeDeliv},
		{Client: ClientUnary, Name: PhasePaced, EndToEnd: &LatencySummary{Count: 10, P50: f.pacedP50}},
		{Client: ClientBatch, Name: PhaseEnqueue, Rate: f.batchRate},
	}}
	if sdkIsUnary {
		s.SameClient = map[string]string{ClientSDK: ClientUnary}
		return s
	}
	s.Phases = append(s.Phases,
		PhaseResult{Client: ClientSDK, Name: PhaseEnqueue, Rate: f.sdkRate},
		PhaseResult{Client: ClientSDK, Name: PhaseEnqueueHalf, Latency: &LatencySummary{Count: 10, P99: f.sdkHalfP99}})
	return s
}

func fullRun() []SystemResult {
	return []SystemResult{
		peerResult("raftq-3", peerFigures{unaryRate: 14000, syncP50: 3.6, pacedP50: 6.4, lifeDeliv: 7500, batchRate: 46000, sdkRate: 30000, sdkHalfP99: 66}, false),
		// nats-sync's half-load p99 (25) is the sdk row's divisor: its
		// sdk client is its unary one.
		peerResult(PeerNATSSync, peerFigures{unaryRate: 40000, syncP50: 1.8, pacedP50: 3.2, lifeDeliv: 7500, batchRate: 50000, sdkHalfP99: 25}, true),
		peerResult(PeerNATS, peerFigures{unaryRate: 65000, syncP50: 0.7, pacedP50: 1.7, lifeDeliv: 23000, batchRate: 46000, sdkHalfP99: 10}, true),
		peerResult(PeerRabbitMQ, peerFigures{unaryRate: 20000, syncP50: 1.9, pacedP50: 2.9, lifeDeliv: 8600, batchRate: 30000, sdkHalfP99: 8}, true),
	}
}

func fullMemory() *MemoryResult {
	return &MemoryResult{Messages: 1_000_000, PayloadSize: 1024, PayloadBytes: 1_024_000_000, RSSBytes: 2_764_800_000,
		Headers: 2, SettleSecs: 30, RestartReadySecs: 13.3, RestartAnswerSecs: 2, TrickleRate: 200, SnapshotSecs: 4,
		TrickleBaseline: LatencySummary{Count: 600, P99: 40}, TrickleSnapshot: LatencySummary{Count: 800, P99: 80}}
}

func TestTargets(t *testing.T) {
	type want struct {
		now    float64
		met    bool
		notRun string // a substring of NotRun; "" for a measured row
		detail string // a substring of Detail
	}
	const (
		unaryNATS = iota
		unaryRabbit
		syncP50
		paced
		lifecycle
		batch
		sdk
		sdkHalf
		rss
		restart
		snapshot
	)
	cases := []struct {
		name    string
		systems []SystemResult
		base    string
		mem     *MemoryResult
		memWhy  string
		want    map[int]want
	}{
		{
			name: "every row measured", systems: fullRun(), base: "raftq-3", mem: fullMemory(),
			want: map[int]want{
				unaryNATS:   {now: 0.35, detail: "14000 / 40000 msgs/s"},
				unaryRabbit: {now: 0.70},
				syncP50:     {now: 2.0},
				paced:       {now: 2.0},
				lifecycle:   {now: 1.0, met: true}, // exactly the goal meets it
				batch:       {now: 1.0, met: true},
				sdk:         {now: 0.75},
				sdkHalf:     {now: 2.64},
				rss:         {now: 2.7, detail: "2637 MiB / 977 MiB (1000000 × 1024 B, 1 plain node; 2 headers + dedup id each, read 30 s after the last enqueue)"},
				restart:     {now: 13.3, detail: "first answer 2.00 s"},
				snapshot:    {now: 2.0, met: true, detail: "80.0 / 40.0 ms p99"},
			},
		},
		{
			name: "another base in the same run (security on)", base: "raftq-3-secure", mem: fullMemory(),
			systems: append(fullRun(), peerResult("raftq-3-secure", peerFigures{unaryRate: 12000, syncP50: 4.5, pacedP50: 8, lifeDeliv: 6000, batchRate: 40000, sdkRate: 24000, sdkHalfP99: 80}, false)),
			want: map[int]want{
				unaryNATS: {now: 0.30, detail: "12000 / 40000 msgs/s"},
				syncP50:   {now: 2.5},
				sdk:       {now: 0.60},
				rss:       {now: 2.7, detail: "1 plain node"},
			},
		},
		{
			name: "a peer not run and memory mode off", base: "raftq-3", memWhy: "needs -mode memory",
			systems: append(fullRun()[:3], SystemResult{System: PeerRabbitMQ, Error: "rabbitmq-server not installed"}),
			want: map[int]want{
				unaryNATS:   {now: 0.35},
				unaryRabbit: {notRun: "rabbitmq did not run"},
				rss:         {notRun: "needs -mode memory"},
				restart:     {notRun: "needs -mode memory"},
				snapshot:    {notRun: "needs -mode memory"},
			},
		},
		{
			name: "base missing a client kind, peer missing from -systems", base: "raftq-3",
			mem: &MemoryResult{Error: "fill: deadline exceeded"},
			systems: func() []SystemResult {
				r := fullRun()
				r[0].Phases = r[0].Phases[:5] // no batch, no sdk
				return r[:2]
			}(),
			want: map[int]want{
				batch:       {notRun: "raftq-3 has no batch enqueue phase"},
				sdk:         {notRun: "raftq-3 has no sdk enqueue phase"},
				unaryNATS:   {now: 0.35},
				unaryRabbit: {notRun: "rabbitmq not in -systems"},
				restart:     {notRun: "memory mode failed: fill: deadline exceeded"},
			},
		},
		{
			name: "an aborted phase and a zero figure are not ratios", base: "raftq-3", mem: func() *MemoryResult {
				m := fullMemory()
				m.TrickleSnapshot = LatencySummary{} // the snapshot finished between two calls
				return m
			}(),
			systems: func() []SystemResult {
				r := fullRun()
				r[0].Phases[0].Aborted = true
				r[1].Phases[2].Latency = nil
				return r
			}(),
			want: map[int]want{
				unaryNATS: {notRun: "raftq-3 unary enqueue failed"},
				syncP50:   {notRun: "nats-sync unary enqueue-sync measured no latency"},
				snapshot:  {notRun: "no call overlapped the snapshot"},
				rss:       {now: 2.7},
			},
		},
		{
			name: "targets met", base: "raftq-3", mem: &MemoryResult{Messages: 10, PayloadSize: 100, PayloadBytes: 1000, RSSBytes: 1400,
				RestartReadySecs: 4, TrickleBaseline: LatencySummary{Count: 5, P99: 10}, TrickleSnapshot: LatencySummary{Count: 5, P99: 15}},
			systems: []SystemResult{
				peerResult("raftq-3", peerFigures{unaryRate: 60000, syncP50: 1, pacedP50: 1, lifeDeliv: 20000, batchRate: 90000, sdkRate: 80000, sdkHalfP99: 5}, false),
				peerResult(PeerNATSSync, peerFigures{unaryRate: 40000, syncP50: 1.8, pacedP50: 3.2, lifeDeliv: 11000, batchRate: 50000, sdkHalfP99: 25}, true),
				peerResult(PeerNATS, peerFigures{unaryRate: 65000, syncP50: 0.7, pacedP50: 1.7, lifeDeliv: 23000, batchRate: 46000, sdkHalfP99: 10}, true),
				peerResult(PeerRabbitMQ, peerFigures{unaryRate: 20000, syncP50: 1.9, pacedP50: 2.9, lifeDeliv: 8600, batchRate: 30000, sdkHalfP99: 8}, true),
			},
			want: map[int]want{
				unaryNATS: {now: 1.5, met: true}, unaryRabbit: {now: 3, met: true}, syncP50: {now: 1 / 1.8, met: true},
				paced: {now: 1 / 3.2, met: true}, lifecycle: {now: 20000.0 / 11000, met: true}, batch: {now: 90000.0 / 46000, met: true},
				sdk: {now: 2, met: true}, sdkHalf: {now: 0.2, met: true}, rss: {now: 1.4, met: true}, restart: {now: 4, met: true},
				snapshot: {now: 1.5, met: true},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := Targets(tc.systems, tc.base, tc.mem, tc.memWhy)
			if len(rows) != 11 {
				t.Fatalf("%d rows, want the issue's 11", len(rows))
			}
			for _, r := range rows {
				if r.Base != tc.base {
					t.Errorf("row %q: base %q, want %q", r.Figure, r.Base, tc.base)
				}
			}
			for i, w := range tc.want {
				r := rows[i]
				if w.notRun != "" {
					if !strings.Contains(r.NotRun, w.notRun) || r.Now != 0 || r.Met {
						t.Errorf("row %q: not run %q, now %v, met %v; want not run %q", r.Figure, r.NotRun, r.Now, r.Met, w.notRun)
					}
					continue
				}
				if r.NotRun != "" || math.Abs(r.Now-w.now) > 0.005 || r.Met != w.met {
					t.Errorf("row %q: now %v, met %v, not run %q; want %v, met %v", r.Figure, r.Now, r.Met, r.NotRun, w.now, w.met)
				}
				if !strings.Contains(r.Detail, w.detail) {
					t.Errorf("row %q: detail %q lacks %q", r.Figure, r.Detail, w.detail)
				}
			}
		})
	}
}

func TestTargetGoalDirection(t *testing.T) {
	for _, tc := range []struct {
		row  TargetRow
		text string
	}{
		{TargetRow{Goal: 1, AtLeast: true, Unit: "×"}, "≥ 1.00×"},
		{TargetRow{Goal: 1.5, AtLeast: true, Unit: "×"}, "≥ 1.50×"},
		{TargetRow{Goal: 5, Unit: "s"}, "≤ 5.0 s"},
		{TargetRow{Goal: 2, Unit: "×"}, "≤ 2.00×"},
	} {
		if got := tc.row.Target(); got != tc.text {
			t.Errorf("target %+v reads %q, want %q", tc.row, got, tc.text)
		}
	}
}

func TestWriteTargets(t *testing.T) {
	rows := Targets(fullRun(), "raftq-3", nil, "needs -mode memory")
	var buf bytes.Buffer
	if err := WriteTargets(&buf, "raftq-3", rows); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, re := range []string{
		`(?m)^figure\s+now\s+target\s+met\s+measured$`,
		`(?m)^one-message unary enqueue vs NATS sync_interval: always\s+0\.35×\s+≥ 1\.00×\s+no\s+14000 / 40000 msgs/s$`,
		`(?m)^lifecycle with unary acks \(deliveries/s\) vs NATS sync_interval: always\s+1\.00×\s+≥ 1\.00×\s+yes\s+7500 / 7500 msgs/s$`,
		`(?m)^restart after kill -9 .*\s+-\s+≤ 5\.0 s\s+not run \(needs -mode memory\)`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("target table does not match %s:\n%s", re, out)
		}
	}
	buf.Reset()
	WriteTargetsMarkdown(&buf, rows)
	if md := buf.String(); !strings.Contains(md, "| enqueue (SDK) vs nats-sync | 0.75× | ≥ 1.00× | no | 30000 / 40000 msgs/s |") ||
		!strings.Contains(md, "| - | ≤ 1.50× | not run (needs -mode memory) | |") {
		t.Errorf("markdown:\n%s", md)
	}
}
