package dashboard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeBackend holds queues in memory and answers as the broker would:
// unknown queues are NotFound, a redrive moves dead letters back.
type fakeBackend struct {
	mu          sync.Mutex
	queues      map[string]*raftqv1.QueueInfo
	dlq         map[string][]*raftqv1.Delivery
	consumers   map[string][]*raftqv1.ConsumerInfo
	leaderErr   error // what every leader-only call fails with, if set
	verifies    int
	redrives    []int64
	redriveReqs []*raftqv1.RedriveRequest // every Redrive, as asked
	peeks       []*raftqv1.PeekRequest    // every Peek, as asked
	calls       []string
	created     *raftqv1.CreateQueueRequest
	updated     *raftqv1.UpdateQueueRequest
	enqueued    []*raftqv1.EnqueueMessage
}

func newFake() *fakeBackend {
	return &fakeBackend{
		queues: map[string]*raftqv1.QueueInfo{
			"jobs": {Name: "jobs", Config: &raftqv1.QueueConfig{DeadLetterQueue: "jobs.dlq", VisibilityTimeoutMs: 600000, MaxDeliveries: 5}, Stats: &raftqv1.QueueStats{Ready: 7, InFlight: 2, DeadLettered: 2, Bytes: 2048, EnqueuedTotal: 11},
				Drain: &raftqv1.DrainEstimate{State: "draining", EmptiesInSec: 90, DeliveriesPerSec: 1.5}},
			"jobs.dlq": {Name: "jobs.dlq", IsDeadLetterQueue: true, Stats: &raftqv1.QueueStats{Ready: 2}},
		},
		dlq: map[string][]*raftqv1.Delivery{"jobs": {
			{Id: "00000000000000a1", Payload: []byte("<script>alert(1)</script>"), DeadLetterReason: "max_deliveries", Attempt: 5},
			{Id: "00000000000000a2", Payload: []byte{0xff, 0xfe}, DeadLetterReason: "nack", Attempt: 1},
		}},
		consumers: map[string][]*raftqv1.ConsumerInfo{"jobs": {{Name: "worker-1", Address: "10.0.0.9:5555", InFlight: 2, Credit: 62}}},
	}
}

func (f *fakeBackend) NodeID() string { return "n2" }
func (f *fakeBackend) Status(context.Context) (*raftqv1.StatusResponse, error) {
	return &raftqv1.StatusResponse{LeaderId: "n1", Term: 3, AppliedIndex: 90, Nodes: []*raftqv1.Node{
		{Id: "n1", State: "leader", Suffrage: "voter", Healthy: true, AppliedIndex: 100, HttpAddr: "10.0.0.1:7403",
			ResidentMemoryBytes: 50 << 20, DataDirFreeBytes: 10 << 30, StartedAtMs: time.Now().Add(-3 * time.Hour).UnixMilli()},
		{Id: "n2", State: "follower", Suffrage: "voter", Healthy: true, AppliedIndex: 90},
		{Id: "n3", State: "unreachable", Suffrage: "voter"},
	}}, nil
}
func (f *fakeBackend) Verify(context.Context) (*raftqv1.VerifyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verifies++
	return &raftqv1.VerifyResponse{Nodes: []*raftqv1.NodeDigest{
		{Id: "n1", Digest: "abcdef0123456789", CountersOk: true, AppliedIndex: 99},
		{Id: "n2", Digest: "abcdef0123456789", CountersOk: true, AppliedIndex: 99},
		{Id: "n3", Error: "unreachable"},
	}, InconsistentIds: []string{"n3"}}, nil
}
func (f *fakeBackend) LocalQueues(context.Context) ([]*raftqv1.QueueInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*raftqv1.QueueInfo
	for _, name := range slices.Sorted(maps.Keys(f.queues)) {
		out = append(out, f.queues[name])
	}
	return out, nil
}
func (f *fakeBackend) LocalQueue(_ context.Context, name string) (*raftqv1.QueueInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "queue %q not found", name)
	}
	return q, nil
}
func (f *fakeBackend) LeaderQueues(ctx context.Context) ([]*raftqv1.QueueInfo, error) {
	if f.leaderErr != nil {
		return nil, f.leaderErr
	}
	var out []*raftqv1.QueueInfo
	qs, _ := f.LocalQueues(ctx)
	for _, q := range qs {
		c := &raftqv1.QueueInfo{Name: q.Name, Stats: &raftqv1.QueueStats{Consumers: int64(len(f.consumers[q.Name]))}}
		out = append(out, c)
	}
	return out, nil
}
func (f *fakeBackend) LeaderQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error) {
	if f.leaderErr != nil {
		return nil, f.leaderErr
	}
	if _, err := f.LocalQueue(ctx, name); err != nil {
		if name == "fresh" { // the leader has it, this node not yet
			return &raftqv1.QueueInfo{Name: name, Config: &raftqv1.QueueConfig{VisibilityTimeoutMs: 600000}, Stats: &raftqv1.QueueStats{Ready: 1}}, nil
		}
		return nil, err
	}
	return &raftqv1.QueueInfo{Name: name, Stats: &raftqv1.QueueStats{Consumers: int64(len(f.consumers[name]))},
		FairnessKeys: []*raftqv1.FairnessKeyStats{{Key: "small", Pending: 1, Weight: 1}, {Key: "big", Pending: 6, Weight: 3, Deficit: 2}, {Key: "idle", Weight: 1}},
		ThrottleKeys: []*raftqv1.ThrottleKeyStats{{Key: "api", Tokens: 1.5, RatePerSec: 2, Burst: 3}},
	}, nil
}
func (f *fakeBackend) ListConsumers(_ context.Context, q string) ([]*raftqv1.ConsumerInfo, error) {
	if f.leaderErr != nil {
		return nil, f.leaderErr
	}
	return f.consumers[q], nil
}
func (f *fakeBackend) Peek(_ context.Context, req *raftqv1.PeekRequest) ([]*raftqv1.Delivery, error) {
	q, dlq := req.GetQueue(), req.GetDeadLetter()
	if f.leaderErr != nil {
		return nil, f.leaderErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peeks = append(f.peeks, req)
	if dlq {
		return f.dlq[q], nil
	}
	if q == "jobs.dlq" { // a DLQ's own messages say where they came from
		var out []*raftqv1.Delivery
		for _, m := range f.dlq["jobs"] {
			c := proto.Clone(m).(*raftqv1.Delivery)
			c.OriginQueue, c.EnqueuedAtMs = "jobs", time.Now().Add(-90*time.Minute).UnixMilli()
			out = append(out, c)
		}
		return out, nil
	}
	return []*raftqv1.Delivery{{Id: "0000000000000001", Payload: []byte("hello"), FairnessKey: "big"}}, nil
}
func (f *fakeBackend) Redrive(_ context.Context, req *raftqv1.RedriveRequest) (int64, error) {
	q, limit := req.GetQueue(), req.GetLimit()
	if f.leaderErr != nil {
		return 0, f.leaderErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[q]; !ok {
		return 0, status.Errorf(codes.NotFound, "queue %q not found", q)
	}
	f.redrives = append(f.redrives, limit)
	f.redriveReqs = append(f.redriveReqs, req)
	if req.GetDryRun() {
		return int64(len(f.dlq[q])), nil
	}
	n := int64(len(f.dlq[q]))
	if limit > 0 {
		n = min(n, limit)
	}
	f.dlq[q] = f.dlq[q][n:]
	return n, nil
}

// calls records the changes asked of the fake, in order.
func (f *fakeBackend) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeBackend) CreateQueue(_ context.Context, req *raftqv1.CreateQueueRequest) (*raftqv1.QueueInfo, error) {
	if f.leaderErr != nil {
		return nil, f.leaderErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[req.GetName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "queue %q already exists", req.GetName())
	}
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	q := &raftqv1.QueueInfo{Name: req.GetName(), Config: req.GetConfig(), Stats: &raftqv1.QueueStats{}}
	f.queues[req.GetName()] = q
	f.calls = append(f.calls, "create "+req.GetName())
	f.created = req
	return q, nil
}
func (f *fakeBackend) UpdateQueue(_ context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.QueueInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated = req
	f.calls = append(f.calls, "update "+req.GetName())
	return f.queues[req.GetName()], nil
}
func (f *fakeBackend) PurgeQueue(_ context.Context, req *raftqv1.PurgeQueueRequest) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[req.GetName()]
	if !ok {
		return 0, status.Errorf(codes.NotFound, "queue %q not found", req.GetName())
	}
	n := q.Stats.Ready + q.Stats.Delayed
	q.Stats.Ready, q.Stats.Delayed = 0, 0
	f.calls = append(f.calls, "purge "+req.GetName()+" key="+req.GetIdempotencyKey())
	return n, nil
}
func (f *fakeBackend) DeleteQueue(_ context.Context, req *raftqv1.DeleteQueueRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[req.GetName()]
	if !ok {
		return status.Errorf(codes.NotFound, "queue %q not found", req.GetName())
	}
	if req.GetIfEmpty() && q.Stats.Ready+q.Stats.InFlight+q.Stats.Delayed > 0 {
		return status.Errorf(codes.FailedPrecondition, "queue %q is not empty", req.GetName())
	}
	delete(f.queues, req.GetName())
	f.calls = append(f.calls, fmt.Sprintf("delete %s if_empty=%v", req.GetName(), req.GetIfEmpty()))
	return nil
}
func (f *fakeBackend) Enqueue(_ context.Context, req *raftqv1.EnqueueRequest) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.queues[req.GetQueue()]; !ok {
		return nil, status.Errorf(codes.NotFound, "queue %q not found", req.GetQueue())
	}
	f.enqueued = append(f.enqueued, req.GetMessages()...)
	return []string{"00000000000000e1"}, nil
}
func (f *fakeBackend) Get(_ context.Context, req *raftqv1.LeaseRequest, _ time.Duration) (*raftqv1.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "get "+req.GetQueue())
	if req.GetQueue() == "jobs.dlq" {
		return nil, nil
	}
	return &raftqv1.Delivery{Id: "00000000000000g1", Payload: []byte("<b>got</b>"), LeaseToken: "tok-1", Attempt: 1, LeaseDeadlineMs: 1}, nil
}
func (f *fakeBackend) Ack(_ context.Context, q string, ref *raftqv1.LeaseRef) error {
	f.record("ack " + q + " " + ref.GetMessageId() + " " + ref.GetLeaseToken())
	if ref.GetLeaseToken() != "tok-1" {
		return status.Error(codes.FailedPrecondition, "lease token is stale: the lease expired or the message was delivered again")
	}
	return nil
}
func (f *fakeBackend) Nack(_ context.Context, q string, n *raftqv1.NackItem) error {
	f.record(fmt.Sprintf("nack %s %s dead_letter=%v delay=%d reason=%s", q, n.GetMessageId(), n.GetDeadLetter(), n.GetDelayMs(), n.GetReason()))
	return nil
}

func newTestDashboard(t *testing.T, b Backend, now func() time.Time) *Dashboard {
	t.Helper()
	d, err := New(Config{Backend: b, Logger: slog.New(slog.DiscardHandler), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func get(t *testing.T, h http.Handler, path string, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestPagesRender(t *testing.T) {
	f := newFake()
	d := newTestDashboard(t, f, time.Now)
	csrf := &http.Cookie{Name: CSRFCookie, Value: "tok-123"}
	for _, tc := range []struct {
		path string
		code int
		want []string
		not  []string
	}{
		{"/", 200, []string{`<dd id="leader">n1</dd>`, `n2 (this node)`, `<td class="lag">10</td>`, `<td class="lag">?</td>`, `abcdef012345`, `agrees`, `unreachable`, `inconsistent`, `href="http://10.0.0.1:7403/"`}, nil},
		{"/queues", 200, []string{`href="/queues/jobs"`, `<td class="ready num">7</td>`, `<td class="in_flight num">2</td>`, `<td class="consumers num">1</td>`, `empties in ~1m30s`, `2.0 KiB`, `class="spark"`}, nil},
		{"/queues/jobs", 200, []string{`worker-1`, `10.0.0.9:5555`, `data-key="big"`, `<td class="num share">75.0%</td>`, `<td class="num share">25.0%</td>`, `data-key="api"`,
			`&lt;script&gt;alert(1)&lt;/script&gt;`, `(2 bytes, binary)`, `max_deliveries`, `name="csrf" value="tok-123"`, `action="/queues/jobs/redrive"`, `hello`, `raftq queue pause jobs [--key KEY]`}, []string{`<script>alert(1)`, `not in the API`}},
		// The DLQ's own page: who it serves (with a redrive button each),
		// what it holds, and its messages' origin, reason, attempts, age.
		{"/queues/jobs.dlq", 200, []string{`DLQ`, `<dd class="holds">2 messages</dd>`, `data-origin="jobs"`, `action="/queues/jobs/redrive"`, `name="back" value="jobs.dlq"`,
			`<th>origin</th><th>reason</th><th>attempts</th><th>age</th>`, `<td class="origin"><a href="/queues/jobs">jobs</a></td><td class="reason">max_deliveries</td><td class="num attempts">5</td>`, `>1h30m</td>`},
			[]string{`id="redrive-form"`, `enqueued_total`, `data-flag="no-consumers"`}},
		// Durations as the CLI writes them.
		{"/queues/jobs?x", 200, []string{`<dt>visibility timeout</dt><dd>10m</dd>`, `name="visibility_timeout_ms" size="6" value="10m"`}, []string{`600000`}},
		// The overview's totals and this node's resources.
		{"/?totals", 200, []string{`<dd class="ready">9</dd>`, `<dd class="in_flight">2</dd>`, `<dd class="held_in_dlqs">2</dd>`, `<dd class="consumers">1</dd>`, `<td class="num memory">50.0 MiB</td>`, `<td class="num disk">10.0 GiB</td>`, `<td class="num uptime">3h</td>`, `<td class="num uptime">-</td>`, `id="flag-stalled"><span class="ok">none</span>`}, nil},
		// A queue this node has not applied yet: the leader's page of it.
		{"/queues/fresh", 200, []string{`id="lagging"`, `<dd class="ready">1</dd>`, `id="publish-payload"`, `id="get"`, `id="purge"`}, nil},
		{"/queues/nope", 404, []string{`queue &#34;nope&#34; not found`}, nil},
		{"/static/app.js", 200, []string{`drawSpark`}, nil},
		{"/static/style.css", 200, []string{`svg.spark`}, nil},
		{"/elsewhere", 404, nil, nil},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body := get(t, d, tc.path, csrf)
			if code != tc.code {
				t.Fatalf("GET %s: %d, want %d\n%s", tc.path, code, tc.code, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q", tc.path, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(body, w) {
					t.Errorf("GET %s has %q", tc.path, w)
				}
			}
		})
	}
}

func TestEveryFormCarriesTheCSRFCookie(t *testing.T) {
	d := newTestDashboard(t, newFake(), time.Now)
	for _, cookie := range []*http.Cookie{nil, {Name: CSRFCookie, Value: "a<b>&c"}} {
		var cs []*http.Cookie
		want := `name="csrf" value=""`
		if cookie != nil {
			cs, want = []*http.Cookie{cookie}, `name="csrf" value="a&lt;b&gt;&amp;c"`
		}
		_, body := get(t, d, "/queues/jobs", cs...)
		// Every form that changes something (a POST) carries it; a GET
		// form (the dead letters' filter) must not put it in a URL.
		if forms, fields := strings.Count(body, `<form method="post"`), strings.Count(body, want); forms == 0 || forms != fields {
			t.Errorf("cookie %v: %d forms, %d with %s", cookie, forms, fields, want)
		}
		if strings.Count(body, "<form") != strings.Count(body, `<form method="post"`)+strings.Count(body, `<form method="get" action="/queues/jobs" id="dlq-filter">`) {
			t.Errorf("a form that is neither a POST nor the dead letters' filter")
		}
	}
}

func TestRedrive(t *testing.T) {
	post := func(h http.Handler, path string, form url.Values) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct {
		name, path, limit string
		leaderErr         error
		code              int
		location          string
		redrives          []int64
	}{
		{"all", "/queues/jobs/redrive", "0", nil, 303, "/queues/jobs?done=redriven&n=2&queue=jobs", []int64{0}},
		{"one", "/queues/jobs/redrive", "1", nil, 303, "/queues/jobs?done=redriven&n=1&queue=jobs", []int64{1}},
		{"no limit field", "/queues/jobs/redrive", "", nil, 303, "/queues/jobs?done=redriven&n=2&queue=jobs", []int64{0}},
		{"negative", "/queues/jobs/redrive", "-1", nil, 400, "", nil},
		{"not a number", "/queues/jobs/redrive", "x", nil, 400, "", nil},
		{"unknown queue", "/queues/nope/redrive", "0", nil, 404, "", nil},
		{"no leader", "/queues/jobs/redrive", "0", status.Error(codes.Unavailable, "no leader"), 503, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.leaderErr = tc.leaderErr
			d := newTestDashboard(t, f, time.Now)
			rec := post(d, tc.path, url.Values{"limit": {tc.limit}, "csrf": {"t"}})
			if rec.Code != tc.code {
				t.Fatalf("POST: %d, want %d: %s", rec.Code, tc.code, rec.Body.String())
			}
			if got := rec.Header().Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
			if len(f.redrives) != len(tc.redrives) || (len(tc.redrives) > 0 && f.redrives[0] != tc.redrives[0]) {
				t.Errorf("redrives %v, want %v", f.redrives, tc.redrives)
			}
		})
	}
	// A GET never redrives.
	f := newFake()
	d := newTestDashboard(t, f, time.Now)
	if code, _ := get(t, d, "/queues/jobs/redrive"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET redrive: %d, want 405", code)
	}
	if len(f.redrives) != 0 {
		t.Errorf("GET redrove: %v", f.redrives)
	}
}

func TestLeaderUnreachableStillShowsThisNodesNumbers(t *testing.T) {
	f := newFake()
	f.leaderErr = status.Error(codes.Unavailable, "no leader known")
	d := newTestDashboard(t, f, time.Now)
	for path, want := range map[string][]string{
		"/queues":      {`<td class="ready num">7</td>`, `<td class="consumers num">?</td>`, `no leader known`},
		"/queues/jobs": {`<dd class="ready">7</dd>`, `from the leader: no leader known`},
	} {
		code, body := get(t, d, path)
		if code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
}

func TestVerifyIsReusedForItsTTL(t *testing.T) {
	f := newFake()
	now := time.Unix(1000, 0)
	d := newTestDashboard(t, f, func() time.Time { return now })
	get(t, d, "/")
	get(t, d, "/")
	now = now.Add(11 * time.Second)
	get(t, d, "/")
	if f.verifies != 2 {
		t.Errorf("%d verifies for three loads over 11 s, want 2", f.verifies)
	}
}

func TestHistory(t *testing.T) {
	h := NewHistory(3)
	t0 := time.Unix(0, 0)
	q := func(name string, depth, enq int64) *raftqv1.QueueInfo {
		return &raftqv1.QueueInfo{Name: name, Stats: &raftqv1.QueueStats{Ready: depth, EnqueuedTotal: enq}}
	}
	for i := range 5 {
		h.Record(t0.Add(time.Duration(i)*time.Second), []*raftqv1.QueueInfo{q("a", int64(i), int64(10*i)), q("b", 1, 0)})
	}
	s := h.Samples("a")
	if len(s) != 3 || s[0].Depth != 2 || s[2].Depth != 4 {
		t.Fatalf("ring holds %+v, want the last 3 (depths 2..4)", s)
	}
	if r := RatesOf(s); !r.Known || r.Enqueued != 10 {
		t.Errorf("rates %+v, want 10 enqueued/s", r)
	}
	h.Record(t0.Add(6*time.Second), []*raftqv1.QueueInfo{q("b", 1, 0)})
	if s := h.Samples("a"); s != nil {
		t.Errorf("a deleted queue keeps %d samples", len(s))
	}
	if r := RatesOf(h.Samples("b")[:1]); r.Known {
		t.Errorf("one sample gives rates %+v", r)
	}
}

func TestRunSamplesUntilCancelled(t *testing.T) {
	f := newFake()
	d, err := New(Config{Backend: f, Logger: slog.New(slog.DiscardHandler), SampleInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for len(d.History().Samples("jobs")) < 2 {
		select {
		case <-deadline:
			t.Fatal("no two samples within 10 s")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
}
