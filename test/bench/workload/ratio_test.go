package workload

import (
	"bytes"
	"slices"
	"testing"
)

func TestWriteRatio(t *testing.T) {
	plain := SystemResult{System: "raftq-3", Phases: []PhaseResult{
		{Client: ClientUnary, Name: PhaseEnqueue, Messages: 1000, Rate: 10000, Latency: &LatencySummary{Count: 10, P50: 10, P99: 40},
			ServerCPU: []ProcCPU{{Name: "n1", Seconds: 1}}},
		{Client: ClientUnary, Name: PhaseLifecycle, Rate: 4000, DeliveryRate: 3000, Latency: &LatencySummary{Count: 10, P50: 20, P99: 50},
			EndToEnd: &LatencySummary{Count: 10, P50: 100, P99: 400}},
	}}
	secure := SystemResult{System: "raftq-3-secure", Phases: []PhaseResult{
		{Client: ClientUnary, Name: PhaseEnqueue, Messages: 1000, Rate: 8000, Latency: &LatencySummary{Count: 10, P50: 12.5, P99: 60},
			ServerCPU: []ProcCPU{{Name: "n1", Seconds: 1.5}}},
		{Client: ClientUnary, Name: PhaseLifecycle, Rate: 3000, DeliveryRate: 3000, Latency: &LatencySummary{Count: 10, P50: 25, P99: 50},
			EndToEnd: &LatencySummary{Count: 10, P50: 150, P99: 200}},
	}}
	// Both ran the SDK client too: one more pair of lines, after unary's.
	withSDK := func(s SystemResult, rate float64) SystemResult {
		s.Phases = append(slices.Clone(s.Phases), PhaseResult{Client: ClientSDK, Name: PhaseEnqueue, Rate: rate})
		return s
	}
	// The secure system ran no lifecycle phase: its figures are "-".
	noLife := secure
	noLife.Phases = secure.Phases[:1]
	for _, tc := range []struct {
		name    string
		systems []SystemResult
		ok      bool
		want    string
	}{
		{"both ran", []SystemResult{plain, secure}, true,
			"raftq-3-secure/raftq-3 unary enqueue: msgs/s 0.80x, p50 1.25x, p99 1.50x\n" +
				"raftq-3-secure/raftq-3 unary lifecycle: msgs/s 0.75x, deliv/s 1.00x, p50 1.25x, p99 1.00x, e2e p50 1.50x, e2e p99 0.50x\n" +
				"raftq-3-secure/raftq-3 all phases: server CPU s / 1k msgs 1.50x\n"},
		{"a phase missing", []SystemResult{noLife, plain}, true,
			"raftq-3-secure/raftq-3 unary enqueue: msgs/s 0.80x, p50 1.25x, p99 1.50x\n" +
				"raftq-3-secure/raftq-3 unary lifecycle: msgs/s -, deliv/s -, p50 -, p99 -, e2e p50 -, e2e p99 -\n" +
				"raftq-3-secure/raftq-3 all phases: server CPU s / 1k msgs 1.50x\n"},
		{"two client kinds", []SystemResult{withSDK(plain, 20000), withSDK(secure, 15000)}, true,
			"raftq-3-secure/raftq-3 unary enqueue: msgs/s 0.80x, p50 1.25x, p99 1.50x\n" +
				"raftq-3-secure/raftq-3 unary lifecycle: msgs/s 0.75x, deliv/s 1.00x, p50 1.25x, p99 1.00x, e2e p50 1.50x, e2e p99 0.50x\n" +
				"raftq-3-secure/raftq-3 sdk enqueue: msgs/s 0.75x, p50 -, p99 -\n" +
				"raftq-3-secure/raftq-3 sdk lifecycle: msgs/s -, deliv/s -, p50 -, p99 -, e2e p50 -, e2e p99 -\n" +
				"raftq-3-secure/raftq-3 all phases: server CPU s / 1k msgs 1.50x\n"},
		{"secure not run", []SystemResult{plain, {System: "raftq-3-secure", Error: "no certificate"}}, false, ""},
		{"plain not in the run", []SystemResult{secure}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if ok := WriteRatio(&buf, tc.systems, "raftq-3-secure", "raftq-3"); ok != tc.ok {
				t.Errorf("WriteRatio = %v, want %v", ok, tc.ok)
			}
			if got := buf.String(); got != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
