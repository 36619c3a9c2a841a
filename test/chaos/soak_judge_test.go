package chaos

import (
	"strings"
	"testing"
)

// TestJudgeSoak: flat figures pass, a resource past its bound fails naming
// it, and a node never sampled at the end fails too.
func TestJudgeSoak(t *testing.T) {
	base := Resources{Node: "n1", Phase: soakPhaseStart, OK: true, RSSBytes: 100 << 20, OpenFiles: 40, Goroutines: 200, LogBytes: 10 << 20, DataBytes: 20 << 20}
	end := base
	end.Phase = soakPhaseEnd
	end.RSSBytes = 150<<20 + rssSlackBytes // exactly the bound
	base.Pid, end.Pid = 100, 200
	if v := JudgeSoak([]Resources{base, end}); !v.OK() || !strings.Contains(v.Table(), "restarted since start") || !strings.Contains(v.Table(), "flat:") {
		t.Fatalf("at the bound: %v %v\n%s", v.Growths, v.Missing, v.Table())
	}
	for _, tc := range []struct {
		what string
		grow func(r *Resources)
	}{
		{"RSS", func(r *Resources) { r.RSSBytes = 150<<20 + rssSlackBytes + 1 }},
		{"goroutines", func(r *Resources) { r.Goroutines = 301 + goroutineSlack }},
		{"open files", func(r *Resources) { r.OpenFiles = 61 + openFileSlack }},
		{"Raft log", func(r *Resources) { r.LogBytes = 15<<20 + logSlackBytes + 1 }},
		{"data dir", func(r *Resources) { r.DataBytes = 30<<20 + dataSlackBytes + 1 }},
	} {
		e := base
		e.Phase = soakPhaseEnd
		tc.grow(&e)
		v := JudgeSoak([]Resources{base, e})
		if v.OK() || len(v.Growths) != 1 || !strings.Contains(v.Growths[0], tc.what) {
			t.Errorf("%s grown: %v", tc.what, v.Growths)
		}
		if got := v.Violations(); len(got) != 1 || got[0].Invariant != InvResourceGrowth {
			t.Errorf("%s grown: violations %v", tc.what, got)
		}
	}
	missing := end
	missing.OK, missing.Err = false, "paused"
	if v := JudgeSoak([]Resources{base, missing}); v.OK() || len(v.Missing) != 1 {
		t.Fatalf("no end sample: %v", v.Missing)
	}
}
