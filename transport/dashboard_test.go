package transport

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestDashboardOnAFollower: the HTTP handler of a follower serves the
// dashboard from its replicated state, asks the leader for consumers and
// dead letters, and a redrive posted to it moves the leader's messages.
func TestDashboardOnAFollower(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 3})
	l, f := c.leader(), c.followers()[0]
	mustCreate(t, l, "dash", &raftqv1.QueueConfig{MaxDeliveries: 1})
	mustEnqueue(t, l, "dash", []byte("one"), []byte("two"), []byte("three"))
	ctx := tctx(t, 30*time.Second)
	stream, err := l.broker.Lease(ctx, &raftqv1.LeaseRequest{Queue: "dash", ConsumerName: "dash-worker", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	ds := recvN(t, stream, 1)
	// Straight to the DLQ: one dead letter to redrive.
	if _, err := l.broker.Nack(ctx, &raftqv1.NackRequest{Queue: "dash", Nacks: []*raftqv1.NackItem{{MessageId: ds[0].Id, LeaseToken: ds[0].LeaseToken, DeadLetter: true}}}); err != nil {
		t.Fatal(err)
	}
	c.synced()

	srv := httptest.NewServer(f.srv.HTTPHandler())
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
		for _, want := range []string{`<span id="queue-name">dash</span>`, `node <b id="node-id">` + f.id, `data-consumer="dash-worker"`, `<dd class="dead_lettered">1</dd>`, `one`} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("lacks %s", want)
			}
		}
		return nil
	})
	if body := get("/"); !strings.Contains(body, `<dd id="leader">`+l.id+`</dd>`) || !strings.Contains(body, "consistent") {
		t.Errorf("cluster page lacks the leader %s or the replica comparison", l.id)
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
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/queues/dash?redriven=1" {
		t.Fatalf("redrive: %d %q, want 303 to ?redriven=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	q, err := l.broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "dash"})
	if err != nil {
		t.Fatal(err)
	}
	// The consumer (one in flight) took the next message meanwhile.
	if st := q.Queue.Stats; st.DeadLettered != 0 || st.Ready+st.InFlight != 3 {
		t.Errorf("after redrive: %v, want 3 ready or in flight, none dead-lettered", st)
	}
}
