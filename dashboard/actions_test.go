package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func post(h http.Handler, path string, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestActions: every change the pages offer, posted as its form would
// post it: what the backend is asked (or that it is not asked at all),
// where the browser is sent, and the API's error on the page with the
// HTTP status its code maps to.
func TestActions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		path     string
		form     url.Values
		code     int
		location string
		body     []string // on the page answered (no redirect)
		calls    []string // asked of the backend, in order
		check    func(t *testing.T, f *fakeBackend)
	}{
		{name: "create", path: "/queues", form: url.Values{"name": {"new"}, "visibility_timeout_ms": {"30s"}, "max_deliveries": {"5"}, "dead_letter_queue": {"new.dlq"}, "message_ttl_ms": {"3 days"}},
			code: 303, location: "/queues/new?done=created&queue=new", calls: []string{"create new"},
			check: func(t *testing.T, f *fakeBackend) {
				c := f.created.GetConfig()
				if c.GetVisibilityTimeoutMs() != 30000 || c.GetMaxDeliveries() != 5 || c.GetDeadLetterQueue() != "new.dlq" || c.GetMessageTtlMs() != 3*86400000 {
					t.Errorf("created with %v", c)
				}
			}},
		{name: "create with a duration that is none", path: "/queues", form: url.Values{"name": {"new"}, "visibility_timeout_ms": {"30 sec"}},
			code: 400, body: []string{`Create: visibility timeout &#34;30 sec&#34; is not a duration`, `id="create-name" required value="new"`}},
		{name: "create one that exists", path: "/queues", form: url.Values{"name": {"jobs"}},
			code: 409, body: []string{`id="action-error"`, `Create: queue &#34;jobs&#34; already exists`}},
		{name: "update sends only what changed", path: "/queues/jobs/update", form: url.Values{"visibility_timeout_ms": {"10m"}, "max_deliveries": {"7"}, "dead_letter_queue": {"jobs.dlq"}, "max_depth": {"0"}},
			code: 303, location: "/queues/jobs?done=updated&fields=max+deliveries", calls: []string{"update jobs"},
			check: func(t *testing.T, f *fakeBackend) {
				if m := f.updated.GetUpdateMask().GetPaths(); !slices.Equal(m, []string{"max_deliveries"}) || f.updated.GetConfig().GetMaxDeliveries() != 7 {
					t.Errorf("update %v", f.updated)
				}
			}},
		{name: "update with nothing changed", path: "/queues/jobs/update", form: url.Values{"visibility_timeout_ms": {"10m"}, "max_deliveries": {"5"}},
			code: 303, location: "/queues/jobs?done=unchanged"},
		{name: "purge asks first", path: "/queues/jobs/purge", form: url.Values{},
			code: 200, body: []string{`Purge every message of jobs?`, `It holds 7 messages ready and 0 messages delayed`, `name="confirm" value="jobs"`, `name="idempotency_key" value="dashboard-`, `action="/queues/jobs/purge"`}},
		{name: "purge confirmed for another queue asks again", path: "/queues/jobs/purge", form: url.Values{"confirm": {"jobs.dlq"}},
			code: 200, body: []string{`name="confirm" value="jobs"`}},
		{name: "purge confirmed", path: "/queues/jobs/purge", form: url.Values{"confirm": {"jobs"}, "idempotency_key": {"k1"}},
			code: 303, location: "/queues/jobs?done=purged&n=7", calls: []string{"purge jobs key=k1"}},
		{name: "delete asks first", path: "/queues/jobs/delete", form: url.Values{"if_empty": {"on"}},
			code: 200, body: []string{`Delete queue jobs?`, `refused if it still holds messages`, `name="if_empty" value="on"`, `name="confirm" value="jobs"`}},
		{name: "delete if empty of a queue that is not", path: "/queues/jobs/delete", form: url.Values{"if_empty": {"on"}, "confirm": {"jobs"}},
			code: 409, body: []string{`Delete: queue &#34;jobs&#34; is not empty`}},
		{name: "delete unticked asks with the choice kept", path: "/queues/jobs/delete", form: url.Values{},
			code: 200, body: []string{`cannot be brought back`, `name="if_empty" value="off"`}},
		{name: "delete confirmed", path: "/queues/jobs/delete", form: url.Values{"if_empty": {"off"}, "confirm": {"jobs"}},
			code: 303, location: "/queues?done=deleted&queue=jobs", calls: []string{"delete jobs if_empty=false"}},
		{name: "publish", path: "/queues/jobs/publish", form: url.Values{"payload": {"hi"}, "priority": {"3"}, "delay": {"1m"}, "fairness_key": {"t1"}},
			code: 303, location: "/queues/jobs?done=published&id=00000000000000e1",
			check: func(t *testing.T, f *fakeBackend) {
				if len(f.enqueued) != 1 || string(f.enqueued[0].Payload) != "hi" || f.enqueued[0].Priority != 3 || f.enqueued[0].DelayMs != 60000 || f.enqueued[0].FairnessKey != "t1" {
					t.Errorf("enqueued %v", f.enqueued)
				}
			}},
		{name: "publish a priority that is no number", path: "/queues/jobs/publish", form: url.Values{"payload": {"hi"}, "priority": {"high"}},
			code: 400, body: []string{`Publish: priority &#34;high&#34; is not a whole number`}},
		{name: "publish to a queue that is gone", path: "/queues/gone/publish", form: url.Values{"payload": {"hi"}},
			code: 404, body: []string{`Publish: queue &#34;gone&#34; not found`}},
		{name: "get", path: "/queues/jobs/get", form: url.Values{"lease": {"1m"}},
			code: 200, calls: []string{"get jobs"},
			body: []string{`id="leased-id">00000000000000g1</code>`, `&lt;b&gt;got&lt;/b&gt;`, `name="lease_token" value="tok-1"`, `action="/queues/jobs/ack"`, `id="nack"`, `id="dead-letter"`}},
		{name: "get with nothing ready", path: "/queues/jobs.dlq/get", form: url.Values{},
			code: 200, calls: []string{"get jobs.dlq"}, body: []string{`id="got-nothing"`}},
		{name: "ack", path: "/queues/jobs/ack", form: url.Values{"id": {"00000000000000g1"}, "lease_token": {"tok-1"}},
			code: 303, location: "/queues/jobs?done=acked&id=00000000000000g1", calls: []string{"ack jobs 00000000000000g1 tok-1"}},
		{name: "ack of an expired lease", path: "/queues/jobs/ack", form: url.Values{"id": {"00000000000000g1"}, "lease_token": {"old"}},
			code: 409, calls: []string{"ack jobs 00000000000000g1 old"}, body: []string{`Ack: lease token is stale: the lease expired or the message was delivered again`}},
		{name: "nack", path: "/queues/jobs/nack", form: url.Values{"id": {"m1"}, "lease_token": {"tok-1"}, "delay": {"5s"}},
			code: 303, location: "/queues/jobs?done=nacked&id=m1", calls: []string{"nack jobs m1 dead_letter=false delay=5000 reason="}},
		{name: "dead-letter", path: "/queues/jobs/nack", form: url.Values{"id": {"m1"}, "lease_token": {"tok-1"}, "dead_letter": {"on"}, "reason": {"bad input"}},
			code: 303, location: "/queues/jobs?done=deadlettered&id=m1", calls: []string{"nack jobs m1 dead_letter=true delay=0 reason=bad input"}},
		{name: "redrive from the DLQ's page goes back there", path: "/queues/jobs/redrive", form: url.Values{"back": {"jobs.dlq"}, "limit": {"0"}},
			code: 303, location: "/queues/jobs.dlq?done=redriven&n=2&queue=jobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			d := newTestDashboard(t, f, time.Now)
			tc.form.Set("csrf", "t")
			rec := post(d, tc.path, tc.form)
			if rec.Code != tc.code {
				t.Fatalf("POST %s: %d, want %d\n%s", tc.path, rec.Code, tc.code, rec.Body.String())
			}
			if got := rec.Header().Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
			for _, w := range tc.body {
				if !strings.Contains(rec.Body.String(), w) {
					t.Errorf("the page lacks %q\n%s", w, rec.Body.String())
				}
			}
			// Purges and deletes refused or not confirmed ask nothing.
			if !slices.Equal(f.calls, tc.calls) {
				t.Errorf("backend asked %q, want %q", f.calls, tc.calls)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

// TestActionsArePostsOnly: a GET of any action's path changes nothing.
func TestActionsArePostsOnly(t *testing.T) {
	f := newFake()
	d := newTestDashboard(t, f, time.Now)
	for _, p := range []string{"/queues/jobs/update", "/queues/jobs/purge?confirm=jobs", "/queues/jobs/delete?confirm=jobs", "/queues/jobs/publish", "/queues/jobs/get", "/queues/jobs/ack", "/queues/jobs/nack", "/queues/jobs/redrive"} {
		if code, _ := get(t, d, p); code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want 405", p, code)
		}
	}
	if len(f.calls) != 0 || len(f.redrives) != 0 {
		t.Errorf("GETs changed things: %v %v", f.calls, f.redrives)
	}
}

// TestActionErrorWhenTheLeaderIsAway: the API's own message, not a
// paraphrase, and the status its code maps to.
func TestActionErrorWhenTheLeaderIsAway(t *testing.T) {
	f := newFake()
	f.leaderErr = status.Error(codes.Unavailable, "no leader: an election is under way; retry")
	d := newTestDashboard(t, f, time.Now)
	rec := post(d, "/queues", url.Values{"name": {"x"}, "csrf": {"t"}})
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "Create: no leader: an election is under way; retry") {
		t.Errorf("%d\n%s", rec.Code, rec.Body.String())
	}
}

func TestDoneNotes(t *testing.T) {
	d := newTestDashboard(t, newFake(), time.Now)
	for _, tc := range []struct{ query, want, not string }{
		{"done=purged&n=1", `id="done">Purged 1 message.</p>`, ""},
		{"done=purged&n=3", `Purged 3 messages.`, ""},
		{"done=redriven&n=2&queue=jobs", `Redrive moved 2 messages back to jobs.`, ""},
		{"done=acked&id=%3Cscript%3E", `Acked message &lt;script&gt;`, "<script>"},
		{"done=anything&id=x", ``, `id="done"`},
	} {
		_, body := get(t, d, "/queues/jobs?"+tc.query)
		if !strings.Contains(body, tc.want) || (tc.not != "" && strings.Contains(body, tc.not)) {
			t.Errorf("?%s: want %q, not %q", tc.query, tc.want, tc.not)
		}
	}
}

func TestStallTracker(t *testing.T) {
	t0 := time.Unix(10000, 0)
	tr := newStallTracker(2 * time.Minute)
	c := func(id string, inFlight, credit, acked int64) *raftqv1.ConsumerInfo {
		return &raftqv1.ConsumerInfo{Id: id, InFlight: inFlight, Credit: credit, Acked: acked, ConnectedSinceMs: t0.UnixMilli()}
	}
	look := func(at time.Duration, cs ...*raftqv1.ConsumerInfo) []bool {
		var out []bool
		for _, r := range tr.observe(t0.Add(at), "q", cs) {
			out = append(out, r.Stalled)
		}
		return out
	}
	for _, step := range []struct {
		at   time.Duration
		cs   []*raftqv1.ConsumerInfo
		want []bool
	}{
		// hung: holds 3, no credit, never acked: from its connection.
		// busy: acks. idle: holds nothing. credit: holds but may take more.
		{time.Minute, []*raftqv1.ConsumerInfo{c("hung", 3, 0, 0), c("busy", 3, 0, 10), c("idle", 0, 0, 0), c("credit", 1, 5, 0)}, []bool{false, false, false, false}},
		{3 * time.Minute, []*raftqv1.ConsumerInfo{c("hung", 3, 0, 0), c("busy", 3, 0, 20), c("idle", 0, 0, 0), c("credit", 1, 5, 0)}, []bool{true, false, false, false}},
		// busy stops acking at 20: stalled 2 minutes after the look that saw 20.
		{4 * time.Minute, []*raftqv1.ConsumerInfo{c("hung", 3, 0, 1), c("busy", 3, 0, 20)}, []bool{false, false}},
		{5 * time.Minute, []*raftqv1.ConsumerInfo{c("hung", 3, 0, 1), c("busy", 3, 0, 20)}, []bool{false, true}},
		{6*time.Minute + time.Second, []*raftqv1.ConsumerInfo{c("hung", 3, 0, 1), c("busy", 3, 0, 20)}, []bool{true, true}},
		// A consumer seen first with acks counts from the first look.
		{7 * time.Minute, []*raftqv1.ConsumerInfo{c("late", 3, 0, 9)}, []bool{false}},
		{9 * time.Minute, []*raftqv1.ConsumerInfo{c("late", 3, 0, 9)}, []bool{true}},
	} {
		if got := look(step.at, step.cs...); !slices.Equal(got, step.want) {
			t.Errorf("at %s: stalled %v, want %v", step.at, got, step.want)
		}
	}
	if n := len(tr.seen["q"].consumers); n != 1 {
		t.Errorf("the tracker keeps %d consumers of q, want the 1 last seen", n)
	}
	tr.observe(t0.Add(2*time.Hour), "other", nil)
	if _, ok := tr.seen["q"]; ok {
		t.Error("a queue not looked at for an hour is kept")
	}
}

// TestFlagsOnThePages: a consumer that holds leases with no credit and
// has not acked since it connected long ago is flagged on its queue's
// page, its queue on the queues page and the overview; a queue with
// ready messages and no consumer is flagged "no consumers".
func TestFlagsOnThePages(t *testing.T) {
	f := newFake()
	now := time.Unix(100000, 0)
	f.consumers["jobs"] = []*raftqv1.ConsumerInfo{
		{Id: "c1", Name: "hung-worker", InFlight: 2, Credit: 0, ConnectedSinceMs: now.Add(-10 * time.Minute).UnixMilli()},
		{Id: "c2", Name: "fresh-worker", InFlight: 2, Credit: 0, ConnectedSinceMs: now.Add(-10 * time.Second).UnixMilli()},
	}
	f.queues["idle"] = &raftqv1.QueueInfo{Name: "idle", Stats: &raftqv1.QueueStats{Ready: 4}}
	d := newTestDashboard(t, f, func() time.Time { return now })
	_, body := get(t, d, "/queues/jobs")
	if !strings.Contains(body, `<tr data-consumer="hung-worker" class="stalled">`) || strings.Contains(body, `<tr data-consumer="fresh-worker" class="stalled">`) {
		t.Errorf("queue page: hung-worker flagged %v, fresh-worker flagged %v", strings.Contains(body, `data-consumer="hung-worker" class="stalled"`), strings.Contains(body, `data-consumer="fresh-worker" class="stalled"`))
	}
	if !strings.Contains(body, `data-flag="stalled" title="consumers hold leases, have no credit and ack nothing">1 stalled</span>`) {
		t.Error("queue page lacks the queue's stalled flag")
	}
	_, body = get(t, d, "/queues/idle")
	if !strings.Contains(body, `data-flag="no-consumers"`) {
		t.Error("idle's page lacks the no-consumers flag")
	}
	_, body = get(t, d, "/queues")
	if !strings.Contains(body, `1 stalled</span>`) || !strings.Contains(body, `data-flag="no-consumers"`) {
		t.Errorf("queues page lacks a flag:\n%s", body)
	}
	_, body = get(t, d, "/")
	if !strings.Contains(body, `<a class="flag" href="/queues/jobs">jobs</a>`) || !strings.Contains(body, `<a class="flag" href="/queues/idle">idle</a>`) {
		t.Errorf("overview lacks a flagged queue:\n%s", body)
	}
}

func TestSparklineScale(t *testing.T) {
	f := newFake()
	d := newTestDashboard(t, f, time.Now)
	t0 := time.Unix(0, 0)
	for i, depth := range []int64{4, 12, 9} {
		d.History().Record(t0.Add(time.Duration(i)*30*time.Second), []*raftqv1.QueueInfo{{Name: "jobs", Stats: &raftqv1.QueueStats{Ready: depth}}})
	}
	_, body := get(t, d, "/queues")
	if !strings.Contains(body, `data-points="4,12,9"`) || !strings.Contains(body, `4–12 msgs · 1m</span>`) {
		t.Errorf("queues page lacks the sparkline's scale:\n%s", body)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "10m": 10 * time.Minute, "3 days": 72 * time.Hour, "1.5 days": 36 * time.Hour, "7d": 168 * time.Hour} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"x days", "10 minutes", "3"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}
