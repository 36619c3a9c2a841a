package transport_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDashboardOnAFollower: the HTTP handler of a follower serves the
// dashboard from its replicated state, asks the leader for consumers and
// dead letters, and a redrive posted to it moves the leader's messages.
func TestDashboardOnAFollower(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l, f := c.Leader(), c.Followers()[0]
	mustCreate(t, l, "dash", &raftqv1.QueueConfig{MaxDeliveries: 1})
	mustEnqueue(t, l, "dash", []byte("one"), []byte("two"), []byte("three"))
	ctx := tctx(t, 30*time.Second)
	stream, err := l.Broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "dash", ConsumerName: "dash-worker", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, stream, 1)
	// Straight to the DLQ: one dead letter to redrive.
	if _, err := l.Broker.Nack(ctx, &raftqv1.NackRequest{Queue: "dash", Nacks: []*raftqv1.NackItem{{MessageId: ds[0].Id, LeaseToken: ds[0].LeaseToken, DeadLetter: true}}}); err != nil {
		t.Fatal(err)
	}
	c.Synced()

	srv := httptest.NewServer(f.API().HTTPHandler())
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	waitUntil(t, 10*time.Second, "the follower's queue page to show the leader's consumer", func() error {
		body := get("/queues/dash")
		for _, want := range []string{`<span id="queue-name">dash</span>`, `node <b id="node-id">` + f.ID, `data-consumer="dash-worker"`, `<dd class="dead_lettered">1`, `one`} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("lacks %s", want)
			}
		}
		return nil
	})
	if body := get("/"); !strings.Contains(body, `<dd id="leader">`+l.ID+`</dd>`) || !strings.Contains(body, "consistent") {
		t.Errorf("cluster page lacks the leader %s or the replica comparison", l.ID)
	}
	// Every node's memory, disk and start time, each asked of the node
	// itself (Status local_only), in Status and on the cluster page.
	waitUntil(t, 10*time.Second, "every node's resources in the follower's Status", func() error {
		st, err := f.Admin.Status(ctx, &raftqv1.StatusRequest{})
		if err != nil {
			return err
		}
		for _, n := range st.GetNodes() {
			if n.GetResidentMemoryBytes() <= 0 || n.GetDataDirFreeBytes() <= 0 || n.GetStartedAtMs() <= 0 || n.GetStartedAtMs() > time.Now().UnixMilli() {
				return fmt.Errorf("%s: memory %d, disk free %d, started %d", n.GetId(), n.GetResidentMemoryBytes(), n.GetDataDirFreeBytes(), n.GetStartedAtMs())
			}
		}
		if len(st.GetNodes()) != 3 {
			return fmt.Errorf("%d nodes", len(st.GetNodes()))
		}
		return nil
	})
	if body := get("/"); strings.Count(body, `<td class="num memory">-</td>`) != 0 || strings.Count(body, `<td class="num uptime">`) != 3 {
		t.Errorf("cluster page lacks a node's memory or uptime:\n%s", body)
	}
	if body := get("/queues"); !strings.Contains(body, `<td class="consumers num">1</td>`) {
		t.Errorf("queues page lacks the leader's consumer count:\n%s", body)
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(srv.URL+"/queues/dash/redrive", url.Values{"limit": {"0"}, "csrf": {""}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/queues/dash?done=redriven&n=1&queue=dash" {
		t.Fatalf("redrive: %d %q, want 303 to ?done=redriven&n=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	q, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "dash"})
	if err != nil {
		t.Fatal(err)
	}
	// The consumer (one in flight) took the next message meanwhile.
	if st := q.Queue.Stats; st.DeadLettered != 0 || st.Ready+st.InFlight != 3 {
		t.Errorf("after redrive: %v, want 3 ready or in flight, none dead-lettered", st)
	}
}

// TestDashboardActionsOnAFollower: through a follower's HTTP handler, a
// queue is created, a message published, got (leased: the follower holds
// the lease's stream at the leader), acked, another purged after the
// confirmation step, and the queue deleted; each change is what the
// leader's state then holds. A Get that the page never settles is
// released when its lease ends, and delivered again.
func TestDashboardActionsOnAFollower(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l, f := c.Leader(), c.Followers()[0]
	ctx := tctx(t, time.Minute)
	srv := httptest.NewServer(f.API().HTTPHandler())
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	postForm := func(path string, form url.Values) (int, string, string) {
		t.Helper()
		resp, err := client.PostForm(srv.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b)
	}
	stats := func() *raftqv1.QueueStats {
		t.Helper()
		q, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return q.GetQueue().GetStats()
	}
	if code, loc, body := postForm("/queues", url.Values{"name": {"web"}, "visibility_timeout_ms": {"10m"}}); code != 303 || loc != "/queues/web?done=created&queue=web" {
		t.Fatalf("create: %d %q\n%s", code, loc, body)
	}
	q, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "web"})
	if err != nil || q.GetQueue().GetConfig().GetVisibilityTimeoutMs() != 600000 {
		t.Fatalf("after create the leader has %v, %v", q, err)
	}
	// The API's refusal, in its words, on the page.
	if code, _, body := postForm("/queues", url.Values{"name": {"web"}}); code != http.StatusConflict || !strings.Contains(body, "Create: ") || !strings.Contains(body, "already exists") {
		t.Errorf("create again: %d\n%s", code, body)
	}
	for _, p := range []string{"first", "second"} {
		if code, loc, body := postForm("/queues/web/publish", url.Values{"payload": {p}}); code != 303 || !strings.HasPrefix(loc, "/queues/web?done=published&id=") {
			t.Fatalf("publish: %d %q\n%s", code, loc, body)
		}
	}
	code, _, body := postForm("/queues/web/get", url.Values{"lease": {"1m"}})
	if code != 200 || !strings.Contains(body, `id="leased"`) || !strings.Contains(body, "first") {
		t.Fatalf("get: %d\n%s", code, body)
	}
	if st := stats(); st.GetInFlight() != 1 || st.GetReady() != 1 {
		t.Fatalf("after get the leader has %v, want 1 in flight, 1 ready", st)
	}
	id := regexp.MustCompile(`name="id" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	token := regexp.MustCompile(`name="lease_token" value="([^"]+)"`).FindStringSubmatch(body)
	if id == nil || token == nil {
		t.Fatalf("the leased message's form lacks its id or token:\n%s", body)
	}
	if code, loc, body := postForm("/queues/web/ack", url.Values{"id": {id[1]}, "lease_token": {token[1]}}); code != 303 || loc != "/queues/web?done=acked&id="+id[1] {
		t.Fatalf("ack: %d %q\n%s", code, loc, body)
	}
	if st := stats(); st.GetInFlight() != 0 || st.GetAckedTotal() != 1 || st.GetReady() != 1 {
		t.Fatalf("after ack the leader has %v, want 1 acked, 1 ready", st)
	}
	// The follower's hold of the stream ends with the ack.
	waitUntil(t, 10*time.Second, "the dashboard's consumer to go", func() error {
		cs, err := l.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "web"})
		if err != nil || len(cs.GetConsumers()) != 0 {
			return fmt.Errorf("consumers %v, %v", cs.GetConsumers(), err)
		}
		return nil
	})
	// An ack retried answers as the first did (the API's rule); one with
	// a token that is no lease gets the API's per-item refusal, on the page.
	if code, _, _ := postForm("/queues/web/ack", url.Values{"id": {id[1]}, "lease_token": {token[1]}}); code != 303 {
		t.Errorf("ack retried: %d", code)
	}
	if code, _, body := postForm("/queues/web/ack", url.Values{"id": {id[1]}, "lease_token": {"not-a-token"}}); code < 400 || !strings.Contains(body, `id="action-error"`) {
		t.Errorf("ack with a bad token: %d\n%s", code, body)
	}

	// A lease left alone ends at its deadline and the message is back.
	if code, _, body := postForm("/queues/web/get", url.Values{"lease": {"1s"}}); code != 200 || !strings.Contains(body, "second") {
		t.Fatalf("get: %d\n%s", code, body)
	}
	waitUntil(t, 20*time.Second, "the unsettled lease to end", func() error {
		if st := stats(); st.GetReady() != 1 || st.GetInFlight() != 0 {
			return fmt.Errorf("%v", st)
		}
		cs, err := l.Broker.ListConsumers(ctx, &raftqv1.ListConsumersRequest{Queue: "web"})
		if err != nil || len(cs.GetConsumers()) != 0 {
			return fmt.Errorf("consumers %v, %v", cs.GetConsumers(), err)
		}
		return nil
	})

	// Purge: the first post only asks.
	code, _, body = postForm("/queues/web/purge", url.Values{})
	if code != 200 || !strings.Contains(body, `name="confirm" value="web"`) || stats().GetReady() != 1 {
		t.Fatalf("unconfirmed purge: %d, ready %d\n%s", code, stats().GetReady(), body)
	}
	key := regexp.MustCompile(`name="idempotency_key" value="([^"]+)"`).FindStringSubmatch(body)
	if key == nil {
		t.Fatalf("confirmation lacks an idempotency key:\n%s", body)
	}
	confirmed := url.Values{"confirm": {"web"}, "idempotency_key": {key[1]}}
	if code, loc, body := postForm("/queues/web/purge", confirmed); code != 303 || loc != "/queues/web?done=purged&n=1" {
		t.Fatalf("purge: %d %q\n%s", code, loc, body)
	}
	// The same confirmation posted again (a double click) purges nothing more.
	mustEnqueue(t, l, "web", []byte("third"))
	if code, loc, _ := postForm("/queues/web/purge", confirmed); code != 303 || loc != "/queues/web?done=purged&n=1" || stats().GetReady() != 1 {
		t.Fatalf("purge resubmitted: %d %q, ready %d", code, loc, stats().GetReady())
	}
	// Delete, only if empty: refused while it holds a message.
	if code, _, body := postForm("/queues/web/delete", url.Values{"if_empty": {"on"}, "confirm": {"web"}}); code != http.StatusConflict || !strings.Contains(body, "Delete: ") {
		t.Fatalf("delete if empty: %d\n%s", code, body)
	}
	if code, loc, body := postForm("/queues/web/delete", url.Values{"if_empty": {"off"}, "confirm": {"web"}}); code != 303 || loc != "/queues?done=deleted&queue=web" {
		t.Fatalf("delete: %d %q\n%s", code, loc, body)
	}
	if _, err := l.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "web"}); status.Code(err) != codes.NotFound {
		t.Fatalf("after delete: %v", err)
	}
}
