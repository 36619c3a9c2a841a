package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// The dead letters' filter form reaches Peek, and the redrive form sends
// the same filter with a dry run, a rate or ids.
func TestDLQFilterAndRedriveForm(t *testing.T) {
	f := newFake()
	d := newTestDashboard(t, f, time.Now)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/queues/jobs?dlq=100&dlq_key=tenant-a&dlq_reason=timeout&dlq_older=1h&dlq_after=0000000000000003", nil))
	if rec.Code != 200 {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body.String())
	}
	want := &raftqv1.PeekRequest{Queue: "jobs", Limit: 100, DeadLetter: true, FairnessKey: "tenant-a", ReasonContains: "timeout", OlderThanMs: 3_600_000, AfterId: "0000000000000003"}
	found := false
	for _, p := range f.peeks {
		found = found || proto.Equal(p, want)
	}
	if !found {
		t.Fatalf("peeks %v, want one %v", f.peeks, want)
	}
	body := rec.Body.String()
	for _, s := range []string{`name="reason_contains" value="timeout"`, `name="older_than" value="1h"`, `id="redrive-dry-run"`} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %s", s)
		}
	}

	post := func(form url.Values) *httptest.ResponseRecorder {
		form.Set("csrf", "t")
		req := httptest.NewRequest(http.MethodPost, "/queues/jobs/redrive", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		return rec
	}
	rec = post(url.Values{"dry_run": {"on"}, "reason_contains": {"timeout"}, "older_than": {"1h"}, "fairness_key": {"tenant-a"}})
	if loc := rec.Header().Get("Location"); rec.Code != 303 || loc != "/queues/jobs?done=redrive-dry&n=2&queue=jobs" {
		t.Fatalf("dry run: %d %q", rec.Code, loc)
	}
	got := f.redriveReqs[len(f.redriveReqs)-1]
	if !got.DryRun || got.ReasonContains != "timeout" || got.OlderThanMs != 3_600_000 || got.FairnessKey != "tenant-a" {
		t.Fatalf("dry run asked %v", got)
	}
	rec = post(url.Values{"rate_per_sec": {"2.5"}, "message_ids": {"0000000000000001, 0000000000000002"}})
	if loc := rec.Header().Get("Location"); rec.Code != 303 || loc != "/queues/jobs?done=redrive-job&n=2&queue=jobs&rate=2.5" {
		t.Fatalf("rate: %d %q", rec.Code, loc)
	}
	got = f.redriveReqs[len(f.redriveReqs)-1]
	if got.RatePerSec != 2.5 || len(got.MessageIds) != 2 || got.MessageIds[1] != "0000000000000002" {
		t.Fatalf("rate-limited redrive asked %v", got)
	}
	rec = post(url.Values{"cancel_job": {"0000000000a00000"}})
	if loc := rec.Header().Get("Location"); rec.Code != 303 || !strings.HasPrefix(loc, "/queues/jobs?done=redrive-cancelled&") {
		t.Fatalf("cancel: %d %q", rec.Code, loc)
	}
	if got := f.redriveReqs[len(f.redriveReqs)-1]; got.CancelJob != "0000000000a00000" || got.RatePerSec != 0 {
		t.Fatalf("cancel asked %v", got)
	}
	n := len(f.redriveReqs)
	for _, bad := range []url.Values{{"rate_per_sec": {"fast"}}, {"older_than": {"-1h"}}, {"older_than": {"soon"}}} {
		if rec := post(bad); rec.Code != 400 || len(f.redriveReqs) != n {
			t.Errorf("%v: %d, %d redrives; want 400 and none", bad, rec.Code, len(f.redriveReqs)-n)
		}
	}
}
