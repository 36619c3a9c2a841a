package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// raftqMetric finds the raftq families a PromQL expression names; a
// histogram's _bucket, _sum and _count series belong to its family.
var raftqMetric = regexp.MustCompile(`\braftq_[a-z0-9_]+`)

func familiesIn(expr string) []string {
	var out []string
	for _, m := range raftqMetric.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			m = strings.TrimSuffix(m, suffix)
		}
		out = append(out, m)
	}
	return out
}

// documentedFamilies lists the families docs/metrics.md documents (each
// in backquotes in a table's first column).
func documentedFamilies(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]bool{}
	for _, m := range regexp.MustCompile("`(raftq_[a-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		fams[m[1]] = true
	}
	if len(fams) < 20 {
		t.Fatalf("found only %d families in docs/metrics.md", len(fams))
	}
	return fams
}

// TestGrafanaDashboardQueriesDocumentedMetrics: deploy/grafana/raftq.json
// parses, and every raftq family its panels query is in docs/metrics.md
// (a renamed or missing family would leave a panel empty).
func TestGrafanaDashboardQueriesDocumentedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/raftq.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("raftq.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard title %q uid %q: both are needed for import", dash.Title, dash.UID)
	}
	docs := documentedFamilies(t)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			fams := familiesIn(tg.Expr)
			if len(fams) == 0 {
				t.Errorf("panel %q: %q names no raftq family", p.Title, tg.Expr)
			}
			for _, f := range fams {
				queried[f] = true
				if !docs[f] {
					t.Errorf("panel %q queries %s, which docs/metrics.md does not document", p.Title, f)
				}
			}
		}
	}
	// The per-queue families the issue fixes are all on the dashboard.
	for _, f := range []string{"raftq_queue_messages", "raftq_queue_bytes", "raftq_queue_consumers", "raftq_queue_oldest_ready_age_seconds",
		"raftq_queue_events_total", "raftq_lease_duration_seconds", "raftq_enqueue_to_delivery_seconds", "raftq_raft_follower_lag_entries"} {
		if !queried[f] {
			t.Errorf("the dashboard does not show %s", f)
		}
	}
}

// TestAlertRules: deploy/prometheus/alerts.yml passes promtool check
// rules, its unit tests (alerts_test.yml) pass promtool test rules, and
// every family it uses is documented.
func TestAlertRules(t *testing.T) {
	rules, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	docs := documentedFamilies(t)
	for _, f := range familiesIn(string(rules)) {
		if !docs[f] {
			t.Errorf("alerts.yml uses %s, which docs/metrics.md does not document", f)
		}
	}
	for _, alert := range []string{"RaftqBacklogGrowing", "RaftqNoConsumers", "RaftqConsumersStalled", "RaftqDeadLettersGrowing", "RaftqReplicaLag", "RaftqLeaderFlapping", "RaftqNoLeader", "RaftqDiskLow", "RaftqDiskFull"} {
		if !strings.Contains(string(rules), "alert: "+alert+"\n") {
			t.Errorf("alerts.yml lacks %s", alert)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (make test installs Debian's prometheus package with apt-get when it can): ", err)
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../deploy/prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s did not report SUCCESS:\n%s", strings.Join(args, " "), out)
		}
	}
}
