package workload

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleSystems() []SystemResult {
	lat := &LatencySummary{Count: 100, P50: 12.5, P99: 80.25, P999: 99, Max: 120, Mean: 20}
	e2e := &LatencySummary{Count: 50, P50: 30, P99: 90}
	return []SystemResult{
		{
			System: "raftq-3", Nodes: 3,
			Phases: []PhaseResult{
				{Client: ClientUnary, Name: PhaseEnqueue, Messages: 200000, Seconds: 10, Rate: 20000, Calls: 200000, Latency: lat,
					ServerCPU: []ProcCPU{{Name: "n1(L)", Seconds: 9.5, Cores: 0.95}, {Name: "n2", Seconds: 3, Cores: 0.3}},
					ClientCPU: ProcCPU{Name: "bench", Seconds: 5, Cores: 0.5}},
				{Client: ClientUnary, Name: PhaseDrain, Messages: 200000, Seconds: 20, Rate: 10000, Deliveries: 200000, DeliveryRate: 10000},
				{Client: ClientUnary, Name: PhaseLifecycle, Messages: 1000, Seconds: 1, Rate: 1000, Latency: lat, EndToEnd: e2e, Deliveries: 1000, DeliveryRate: 900, Entries: 1100, EntriesPerMessage: 1.1},
			},
			Check: &Check{Acked: 201000, Delivered: 201000},
			Notes: []string{"three nodes"},
		},
		{
			System: "nats", Nodes: 3,
			Phases: []PhaseResult{
				{Client: ClientUnary, Name: PhaseEnqueue, Messages: 400000, Seconds: 10, Rate: 40000, Latency: lat, Errors: 2, FirstError: "timeout"},
			},
			SameClient: map[string]string{ClientSDK: ClientUnary},
			Check:      &Check{Acked: 400000, Delivered: 399999, Missing: 1, Examples: []string{"missing phase=1 producer=0 seq=7"}},
		},
		{System: "rabbitmq", Error: "rabbitmq-server not installed"},
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, sampleSystems()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, re := range []string{
		`(?m)^\s*system\s+client\s+phase\s+messages\s+msgs/s\s+p50 ms\s+p99 ms\s+p999 ms`,
		`(?m)^\s*raftq-3\s+unary\s+enqueue\s+200000\s+20000\s+12\.5\s+80\.2\s+99\.0\s+-\s+-\s+-\s+-\s+0\s+n1\(L\) 9\.5 \(0\.95\) n2 3\.0 \(0\.30\)\s+bench 5\.0 \(0\.50\)`,
		`(?m)^\s*raftq-3\s+unary\s+lifecycle\s+1000\s+1000\s+.*\s900\s+1\.100\s+30\.0\s+90\.0\s`,
		`(?m)^\s*rabbitmq\s+\(not run\)`,
		`(?m)^raftq-3: exactly once: acked 201000, delivered 201000 distinct, missing 0`,
		`(?m)^nats: NOT exactly once: .*missing 1`,
		`(?m)^  missing phase=1 producer=0 seq=7$`,
		`(?m)^nats unary enqueue: 2 errors, first: timeout$`,
		`(?m)^nats: note: its sdk client is its unary client; the unary figures are those$`,
		`(?m)^rabbitmq: NOT RUN OR FAILED: rabbitmq-server not installed$`,
		`(?m)^raftq-3: note: three nodes$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("table does not match %s:\n%s", re, out)
		}
	}
}

func TestWriteComparisonRatios(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteComparison(&buf, sampleSystems(), "raftq-3"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, re := range []string{
		`(?m)^\s*figure\s+raftq-3\s+nats\s+rabbitmq\s+raftq-3/nats\s+raftq-3/rabbitmq\s*$`,
		// 20000 / 40000 msgs/s; rabbitmq did not run, so no ratio.
		`(?m)^\s*unary enqueue msgs/s\s+20000\s+40000\s+-\s+0\.50x\s+-\s*$`,
		`(?m)^\s*unary enqueue p99 ms\s+80\.2\s+80\.2\s+-\s+1\.00x\s+-\s*$`,
		`(?m)^\s*unary drain msgs/s\s+10000\s+-\s+-\s+-\s+-\s*$`,
		// raftq-3 ran no sdk phase; nats's sdk figures are its unary ones.
		`(?m)^\s*sdk enqueue msgs/s\s+-\s+40000\s+-\s+-\s+-\s*$`,
		// The split: (9.5 + 3) s of the servers and 5 s of the load
		// generator over 200000 messages; nats measured no CPU.
		`(?m)^\s*unary enqueue server CPU us/msg\s+62\.5\s+-\s+-\s+-\s+-\s*$`,
		`(?m)^\s*unary enqueue client CPU us/msg\s+25\.0\s+-\s+-\s+-\s+-\s*$`,
		// (9.5 + 3) CPU seconds over 200000 + 200000 + 1000 + 1000 messages.
		`(?m)^\s*server CPU s / 1k msgs\s+0\.031\s+-\s+-`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("comparison does not match %s:\n%s", re, out)
		}
	}
	// No system ran the batch client: its rows are left out.
	if strings.Contains(out, "batch enqueue") {
		t.Errorf("comparison shows rows nobody measured:\n%s", out)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	rep := &Report{
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Command: "bench -systems raftq-3",
		Machine: Machine{CPUs: 2, Go: "go1.26", Fsync: &LatencySummary{Count: 10, P50: 0.3}},
		Config:  DefaultConfig(),
		Systems: sampleSystems(),
		Memory:  &MemoryResult{Messages: 1000000, RSSBytes: 2 << 30, TrickleSnapshot: LatencySummary{Max: 400}},
		Profiles: []Profile{{System: "raftq-3", Process: "n1(L)", Phase: PhaseEnqueue, Tool: "perf",
			Top: []ProfileEntry{{Percent: 12.5, Symbol: "runtime.mallocgc"}}}},
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, rep) {
		t.Fatalf("round trip changed the report:\n got %+v\nwant %+v", got, *rep)
	}
	// Field names are part of what downstream scripts read.
	for _, key := range []string{`"msgs_per_sec": 20000`, `"p99_ms": 80.25`, `"cpu_seconds": 9.5`, `"missing": 1`,
		`"left_in_queue": 0`, `"enqueue": {`, `"duration_ns": 10000000000`, `"rss_bytes": 2147483648`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestWriteMemoryAndProfile(t *testing.T) {
	var buf bytes.Buffer
	WriteMemory(&buf, &MemoryResult{Messages: 1000, PayloadSize: 1024, PayloadBytes: 1024000, RSSBytes: 3 * 1024000,
		TrickleSnapshot: LatencySummary{Count: 5, P99: 250, Max: 300}, SnapshotOtherCores: 0.25, RestartReadySecs: 1.5, Expected: 1000, Found: 1000})
	WriteProfile(&buf, Profile{System: "raftq-1", Process: "n1", Phase: "enqueue", Tool: "perf",
		Top: []ProfileEntry{{Percent: 9.87, Symbol: "syscall.Syscall6"}}})
	out := buf.String()
	for _, s := range []string{"VmRSS 3 MiB for 1 MiB of payload (3.00x)", "p99 250.0 / max 300.0 ms (5 calls)", "other CPU during it 0.25 cores",
		"all 1000 messages visible after 1.50s", "   9.87%  syscall.Syscall6"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}
