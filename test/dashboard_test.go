package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// findChromium looks for the browser the Makefile installs (Debian's
// chromium) or another Chromium-based one on PATH; RAFTQ_CHROMIUM names
// one explicitly.
func findChromium() (string, error) {
	if p := os.Getenv("RAFTQ_CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of chromium, chromium-browser, google-chrome on PATH (make test installs Debian's chromium with apt-get when it can)")
}

// browser starts headless Chromium for the test; everything it started
// ends with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := findChromium()
	if err != nil {
		t.Skip("no browser for the dashboard test: ", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in a container has no user namespace for the sandbox
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// Start the browser now, on a context without a deadline (it lives
	// as long as the context of its first call), so a failure to start
	// is reported as such.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return bctx
}

// do runs browser steps with a deadline.
func do(t *testing.T, bctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// get runs one browser action that returns a value, with a deadline.
func get[T any](t *testing.T, bctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// count is how many elements match a CSS selector now.
func count(t *testing.T, bctx context.Context, sel string) int {
	t.Helper()
	return get(t, bctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

func text(t *testing.T, bctx context.Context, sel string) string {
	t.Helper()
	return get(t, bctx, chromedp.Text(chromedp.CSS(sel)))
}

// screenshot keeps a full-page screenshot as a test artifact (go test
// -artifacts keeps them; make test does, under test-artifacts/).
func screenshot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	// A full screenshot is the document's laid-out content size. Right
	// after a form's answer replaced the page, the test can see the new
	// document's text before it has loaded and been laid out, and
	// Chromium then refuses: "Cannot take screenshot with 0 width" (a
	// loaded fresh-clone run). Wait for the page to be loaded and laid out.
	const laidOut = `document.readyState === "complete" && document.documentElement.scrollWidth > 0 && document.documentElement.scrollHeight > 0`
	harness.Eventually(t, 30*time.Second, func() error {
		if !get(t, bctx, chromedp.Evaluate[bool](laidOut)) {
			return fmt.Errorf("%s: the page is not loaded and laid out yet", name)
		}
		return nil
	})
	png := get(t, bctx, chromedp.FullScreenshot(100))
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// pageNumbers reads the numbers of one queue from the queues page.
func pageNumbers(t *testing.T, bctx context.Context, node *harness.Node, queue string) map[string]string {
	t.Helper()
	row := fmt.Sprintf(`tr[data-queue=%q]`, queue)
	do(t, bctx, chromedp.Navigate("http://"+node.HTTP+"/queues"), chromedp.WaitVisible(chromedp.CSS(row)))
	got := map[string]string{}
	for _, k := range []string{"ready", "delayed", "in_flight", "dead_lettered", "consumers"} {
		got[k] = text(t, bctx, row+" td."+k)
	}
	got["bytes"] = get(t, bctx, chromedp.AttributeValue(chromedp.CSS(row+" td.bytes"), "data-bytes")).Value
	return got
}

// metricsOf reads one node's /metrics.
func metricsOf(node *harness.Node) (string, error) {
	resp, err := http.Get("http://" + node.HTTP + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sample finds the value of one series in a text exposition.
func sample(metrics, series string) (string, bool) {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// cliQueue is `raftq queue get --json` against node.
func cliQueue(t *testing.T, ctx context.Context, node *harness.Node, queue string) *raftqv1.QueueInfo {
	t.Helper()
	q := &raftqv1.QueueInfo{}
	if err := protojson.Unmarshal([]byte(cli(t, ctx, node, "--json", "queue", "get", queue)), q); err != nil {
		t.Fatal(err)
	}
	return q
}

// mixedWorkload enqueues to two queues from several producers while a
// consumer acks, and dead-letters some, of what it gets; then a consumer
// named dash-holder takes three messages and holds them, so the numbers
// stay put for the comparison.
func mixedWorkload(t *testing.T, ctx context.Context, leader *harness.Node) raftqv1.Broker_LeaseClient {
	t.Helper()
	b := raftqv1.NewBrokerClient(rawConn(t, leader))
	for _, q := range []*raftqv1.CreateQueueRequest{
		{Name: "orders", Config: &raftqv1.QueueConfig{Throttles: map[string]*raftqv1.ThrottleRule{"api": {RatePerSec: 1000, Burst: 20}}}},
		{Name: "emails"},
	} {
		if _, err := b.CreateQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for p, tenant := range []string{"tenant-a", "tenant-b", "tenant-c"} {
		wg.Go(func() {
			for i := range 20 {
				req := &raftqv1.EnqueueRequest{Queue: "orders"}
				for j := range 5 {
					req.Messages = append(req.Messages, &raftqv1.EnqueueMessage{
						Payload: fmt.Appendf(nil, "order %s %d-%d", tenant, i, j), FairnessKey: tenant, Weight: uint32(p + 1), ThrottleKeys: []string{"api"},
					})
				}
				if _, err := b.Enqueue(ctx, req); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 30 {
			m := &raftqv1.EnqueueMessage{Payload: fmt.Appendf(nil, "email %d", i)}
			if i%3 == 0 {
				m.DelayMs = int64(time.Hour / time.Millisecond) // stays delayed
			}
			if _, err := b.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "emails", Messages: []*raftqv1.EnqueueMessage{m}}); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		// Acks 40 and dead-letters 10 of what it gets while producers run.
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := b.Lease(lctx, &raftqv1.LeaseRequest{Queue: "orders", ConsumerName: "ack-worker", MaxInFlight: 8, Limit: 50})
		if err != nil {
			errs <- err
			return
		}
		for n := 0; n < 50; {
			resp, err := s.Recv()
			if err != nil {
				errs <- err
				return
			}
			for _, d := range resp.Messages {
				ref := &raftqv1.LeaseRef{MessageId: d.Id, LeaseToken: d.LeaseToken}
				if n < 10 {
					_, err = b.Nack(ctx, &raftqv1.NackRequest{Queue: "orders", Nacks: []*raftqv1.NackItem{{MessageId: d.Id, LeaseToken: d.LeaseToken, DeadLetter: true, Reason: "poison"}}})
				} else {
					_, err = b.Ack(ctx, &raftqv1.AckRequest{Queue: "orders", Acks: []*raftqv1.LeaseRef{ref}})
				}
				if err != nil {
					errs <- err
					return
				}
				n++
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	holder, err := b.Lease(ctx, &raftqv1.LeaseRequest{Queue: "orders", ConsumerName: "dash-holder", MaxInFlight: 3, VisibilityTimeoutMs: int64(time.Hour / time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < 3; {
		resp, err := holder.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got += len(resp.Messages)
	}
	return holder
}

// TestDashboardInABrowser: a 3-node cluster under a mixed workload; the
// dashboard of a follower and of the leader, loaded in headless Chromium,
// shows the same per-queue numbers as that node's /metrics and the CLI;
// the queue page lists the consumer by name, the fairness and throttle
// keys and the dead letters; clicking Redrive on the follower moves them
// back. Screenshots are kept as artifacts.
func TestDashboardInABrowser(t *testing.T) {
	bctx := browser(t)
	// A consumer holding leases with no credit is flagged after 3s (2m
	// by default), so the test sees the flag without waiting minutes.
	nodes, _ := startCluster(t, 3, "--dashboard-stall-after", "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	leader := leaderOf(t, nodes)
	var follower *harness.Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	mixedWorkload(t, ctx, leader)

	// The same numbers everywhere, once the node has applied what the
	// leader has (the page and /metrics read the node's own state; the
	// CLI asks the leader).
	check := func(node *harness.Node) {
		harness.Eventually(t, 60*time.Second, func() error {
			for _, queue := range []string{"orders", "emails"} {
				cq := cliQueue(t, ctx, node, queue)
				st := cq.GetStats()
				want := map[string]string{
					"ready": itoa(st.GetReady()), "delayed": itoa(st.GetDelayed()), "in_flight": itoa(st.GetInFlight()),
					"dead_lettered": itoa(st.GetDeadLettered()), "bytes": itoa(st.GetBytes()), "consumers": itoa(st.GetConsumers()),
				}
				page := pageNumbers(t, bctx, node, queue)
				m, err := metricsOf(node)
				if err != nil {
					return err
				}
				lm, err := metricsOf(leader) // consumers: a leader-only family
				if err != nil {
					return err
				}
				for k, v := range want {
					series := fmt.Sprintf(`raftq_queue_messages{queue=%q,state=%q}`, queue, k)
					src := m
					switch k {
					case "bytes":
						series = fmt.Sprintf(`raftq_queue_bytes{queue=%q}`, queue)
					case "consumers":
						series, src = fmt.Sprintf(`raftq_queue_consumers{queue=%q}`, queue), lm
					}
					mv, ok := sample(src, series)
					if !ok || mv != v || page[k] != v {
						return fmt.Errorf("%s on %s: CLI %s, page %q, /metrics %q", series, node.ID, v, page[k], mv)
					}
				}
			}
			return nil
		})
	}
	orders := cliQueue(t, ctx, leader, "orders").GetStats()
	if orders.GetDeadLettered() != 10 || orders.GetInFlight() != 3 || orders.GetConsumers() != 1 {
		t.Fatalf("workload left orders at %v, want 10 dead-lettered, 3 in flight, 1 consumer", orders)
	}
	check(follower)
	check(leader)

	// The sparkline has been drawn by the page's script once two samples exist.
	harness.Eventually(t, 60*time.Second, func() error {
		do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="orders"]`)))
		if count(t, bctx, `tr[data-queue="orders"] svg.spark[data-drawn="true"] polyline`) != 1 {
			return fmt.Errorf("sparkline not drawn yet")
		}
		return nil
	})
	screenshot(t, bctx, "queues-follower")

	// The cluster page on the follower: the leader, three healthy nodes
	// whose digests agree.
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/"), chromedp.WaitVisible(chromedp.CSS(`#nodes`)))
	leaderText, verify, rows := text(t, bctx, `#leader`), text(t, bctx, `#verify span`), count(t, bctx, `#nodes tbody tr`)
	if leaderText != leader.ID || verify != "consistent" || rows != 3 {
		t.Errorf("cluster page on %s: leader %q (want %s), replicas %q, %d nodes", follower.ID, leaderText, leader.ID, verify, rows)
	}
	if n := count(t, bctx, `#nodes td.health .ok`); n != 3 {
		t.Errorf("%d healthy nodes on the cluster page, want 3", n)
	}
	if n := count(t, bctx, `#nodes td.digest .ok`); n != 3 {
		t.Errorf("%d nodes whose digest agrees, want 3", n)
	}
	screenshot(t, bctx, "cluster-follower")
	do(t, bctx, chromedp.Navigate("http://"+leader.HTTP+"/"), chromedp.WaitVisible(chromedp.CSS(`#nodes`)))
	screenshot(t, bctx, "cluster-leader")

	// One queue on the follower: what only the leader knows, and the DLQ.
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues/orders"), chromedp.WaitVisible(chromedp.CSS(`#redrive`)))
	consumer, keys, throttle := text(t, bctx, `#consumers tr[data-consumer="dash-holder"]`), text(t, bctx, `#fairness-keys`), text(t, bctx, `#throttle-keys`)
	dlqRows := count(t, bctx, `#dlq tbody tr`)
	if !strings.Contains(consumer, "dash-holder") || !strings.Contains(consumer, "127.0.0.1:") {
		t.Errorf("consumer row %q", consumer)
	}
	for _, k := range []string{"tenant-a", "tenant-b", "tenant-c"} {
		if !strings.Contains(keys, k) {
			t.Errorf("fairness keys lack %s: %q", k, keys)
		}
	}
	if !strings.Contains(throttle, "api") {
		t.Errorf("throttle buckets lack api: %q", throttle)
	}
	if dlqRows != 10 {
		t.Errorf("%d dead letters shown, want 10", dlqRows)
	}
	screenshot(t, bctx, "queue-orders-follower")

	// The dead letters' filter and a dry run (log version 14): the page
	// lists what the filter selects, the redrive form carries it, and a
	// dry run counts without moving anything.
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues/orders?dlq=100&dlq_reason=nothing-like-this"), chromedp.WaitVisible(chromedp.CSS(`#redrive`)))
	if n := count(t, bctx, `#no-dlq`); n != 1 {
		t.Errorf("a filter that matches nothing: %d no-dead-letters notes, want 1", n)
	}
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues/orders"), chromedp.WaitVisible(chromedp.CSS(`#dlq-filter`)))
	do(t, bctx, chromedp.SetValue(chromedp.CSS(`#dlq-filter input[name="dlq_reason"]`), "poison"))
	submit(t, bctx, `#dlq-filter-apply`, `#dlq-filter-clear`, "clear")
	if n := count(t, bctx, `#dlq tbody tr`); n != 10 {
		t.Errorf("the filter reason~poison lists %d dead letters, want 10", n)
	}
	if v := get(t, bctx, chromedp.Evaluate[string](`document.querySelector('#redrive-form input[name="reason_contains"]').value`)); v != "poison" {
		t.Errorf("the redrive form carries reason %q, want the filter's", v)
	}
	screenshot(t, bctx, "queue-orders-dlq-filter")
	submit(t, bctx, `#redrive-dry-run`, `#done`, "Dry run: a redrive would move 10 messages back to orders; nothing moved.")
	if st := cliQueue(t, ctx, leader, "orders").GetStats(); st.GetDeadLettered() != 10 {
		t.Errorf("after a dry run the CLI shows %d dead-lettered, want 10", st.GetDeadLettered())
	}

	// The stalled consumer: dash-holder holds its 3 leases (max in
	// flight 3, so no credit) and acks nothing.
	harness.Eventually(t, 30*time.Second, func() error {
		do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues/orders"), chromedp.WaitVisible(chromedp.CSS(`#consumers`)))
		if count(t, bctx, `#consumers tr[data-consumer="dash-holder"].stalled [data-flag="stalled"]`) != 1 {
			return fmt.Errorf("dash-holder not flagged stalled yet")
		}
		return nil
	})
	if n := count(t, bctx, `h1 [data-flag="stalled"]`); n != 1 {
		t.Errorf("the queue's heading has %d stalled flags, want 1", n)
	}
	screenshot(t, bctx, "queue-orders-stalled-consumer")
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues"), chromedp.WaitVisible(chromedp.CSS(`#queues`)))
	if n := count(t, bctx, `tr[data-queue="orders"] [data-flag="stalled"]`); n != 1 {
		t.Errorf("the queues page flags orders stalled %d times, want 1", n)
	}
	if n := count(t, bctx, `tr[data-queue="emails"] [data-flag="no-consumers"]`); n != 1 {
		t.Errorf("the queues page flags emails (ready messages, no consumer) %d times, want 1", n)
	}
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/"), chromedp.WaitVisible(chromedp.CSS(`#overview`)))
	if flags := text(t, bctx, `#flag-stalled`); !strings.Contains(flags, "orders") {
		t.Errorf("overview's stalled consumers: %q", flags)
	}
	screenshot(t, bctx, "overview-follower")

	// The DLQ's own page: what it holds and, for each message, its
	// origin, reason, attempts and age; then redrive from there.
	dlq := cliQueue(t, ctx, leader, "orders").GetConfig().GetDeadLetterQueue()
	do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues/"+dlq), chromedp.WaitVisible(chromedp.CSS(`#dlq-messages`)))
	cols := get(t, bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#dlq-messages thead th")].map(th => th.textContent)`))
	if strings.Join(cols, ",") != "id,origin,reason,attempts,age,payload" {
		t.Errorf("DLQ page columns %q", cols)
	}
	if n := count(t, bctx, `#dlq-messages tbody tr`); n != 10 {
		t.Errorf("DLQ page lists %d messages, want 10", n)
	}
	row := get(t, bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#dlq-messages tbody tr:first-child td")].map(td => td.textContent)`))
	if len(row) != 6 || row[1] != "orders" || row[2] != "nack: poison" || row[3] != "1" || row[4] == "" || row[4] == "-" {
		t.Errorf("DLQ page's first row %q, want origin orders, reason nack: poison, 1 attempt and an age", row)
	}
	if holds := text(t, bctx, `#stats .holds`); holds != "10 messages" {
		t.Errorf("DLQ page holds %q, want 10 messages", holds)
	}
	screenshot(t, bctx, "dlq-follower")
	submit(t, bctx, `tr[data-origin="orders"] button.redrive`, `#done`, "Redrive moved 10 messages back to orders.")
	if st := cliQueue(t, ctx, leader, "orders").GetStats(); st.GetDeadLettered() != 0 || st.GetReady() != orders.GetReady()+10 {
		t.Errorf("after redrive the CLI shows %v, want none dead-lettered and 10 more ready than %d", st, orders.GetReady())
	}
	harness.Eventually(t, 30*time.Second, func() error {
		do(t, bctx, chromedp.Navigate("http://"+follower.HTTP+"/queues/orders"), chromedp.WaitVisible(chromedp.CSS(`#stats`)))
		if count(t, bctx, `#no-dlq`) != 1 {
			return fmt.Errorf("the follower's page still lists dead letters")
		}
		return nil
	})
	screenshot(t, bctx, "queue-orders-after-redrive")

	// Act from the follower's pages: create → publish → get → ack → purge.
	base := "http://" + follower.HTTP
	do(t, bctx, chromedp.Navigate(base+"/queues"), chromedp.WaitVisible(chromedp.CSS(`#create-form`)),
		chromedp.SendKeys(chromedp.CSS(`#create-name`), "web"),
		chromedp.SendKeys(chromedp.CSS(`#create-form input[name="visibility_timeout_ms"]`), "10m"))
	submit(t, bctx, `#create`, `#done`, "Created queue web.")
	if v := cliQueue(t, ctx, leader, "web").GetConfig().GetVisibilityTimeoutMs(); v != 600000 {
		t.Errorf("web's visibility timeout is %d ms, want 10m", v)
	}
	for _, p := range []string{"hello from chromium", "to be purged"} {
		do(t, bctx, chromedp.SendKeys(chromedp.CSS(`#publish-payload`), p))
		submit(t, bctx, `#publish`, `#done`, "Published message")
	}
	screenshot(t, bctx, "queue-web-published")
	submit(t, bctx, `#get`, `#leased-payload`, "hello from chromium")
	if st := cliQueue(t, ctx, leader, "web").GetStats(); st.GetInFlight() != 1 || st.GetReady() != 1 {
		t.Errorf("after get the CLI shows %v, want 1 in flight, 1 ready", st)
	}
	screenshot(t, bctx, "queue-web-leased")
	submit(t, bctx, `#ack`, `#done`, "Acked message")
	if st := cliQueue(t, ctx, leader, "web").GetStats(); st.GetInFlight() != 0 || st.GetAckedTotal() != 1 || st.GetReady() != 1 {
		t.Errorf("after ack the CLI shows %v, want 1 acked, 1 ready", st)
	}
	submit(t, bctx, `#purge`, `#confirm-detail`, "It holds 1 message ready")
	screenshot(t, bctx, "queue-web-purge-confirm")
	if st := cliQueue(t, ctx, leader, "web").GetStats(); st.GetReady() != 1 {
		t.Errorf("the purge's first step purged: %v", st)
	}
	submit(t, bctx, `#confirm`, `#done`, "Purged 1 message.")
	if st := cliQueue(t, ctx, leader, "web").GetStats(); st.GetReady() != 0 || st.GetAckedTotal() != 1 {
		t.Errorf("after purge the CLI shows %v, want nothing ready", st)
	}
	screenshot(t, bctx, "queue-web-purged")

	// Pauses, set with the CLI, shown on the follower's pages: the whole
	// queue (a flag on both pages, "paused" with its end) and a key
	// paused on its own, listed with "until resumed".
	do(t, bctx, chromedp.Navigate(base+"/queues/web"), chromedp.WaitVisible(chromedp.CSS(`#paused`)))
	if p := text(t, bctx, `#paused`); p != "no" {
		t.Errorf("web before any pause shows paused %q", p)
	}
	cli(t, ctx, leader, "queue", "pause", "web", "--for", "1h")
	cli(t, ctx, leader, "queue", "pause", "web", "--key", "tenant-x")
	if q := cliQueue(t, ctx, leader, "web"); !q.GetPaused() || len(q.GetPausedKeys()) != 1 {
		t.Fatalf("the CLI shows web %v after two pauses", q)
	}
	harness.Eventually(t, 30*time.Second, func() error {
		do(t, bctx, chromedp.Navigate(base+"/queues/web"), chromedp.WaitVisible(chromedp.CSS(`#paused`)))
		if p := text(t, bctx, `#paused`); !strings.HasPrefix(p, "yes, until 20") {
			return fmt.Errorf("the follower's page shows paused %q", p)
		}
		return nil
	})
	if k := text(t, bctx, `#paused-keys li[data-key="tenant-x"]`); !strings.Contains(k, "until resumed") {
		t.Errorf("paused key row %q", k)
	}
	if n := count(t, bctx, `h1 [data-flag="paused"]`); n != 1 {
		t.Errorf("the queue's heading has %d paused flags, want 1", n)
	}
	screenshot(t, bctx, "queue-web-paused")
	do(t, bctx, chromedp.Navigate(base+"/queues"), chromedp.WaitVisible(chromedp.CSS(`#queues`)))
	if n := count(t, bctx, `tr[data-queue="web"] [data-flag="paused"]`) + count(t, bctx, `tr[data-queue="web"] [data-flag="paused-keys"]`); n != 2 {
		t.Errorf("the queues page flags web's pauses %d times, want 2", n)
	}
	cli(t, ctx, leader, "queue", "resume", "web")
	cli(t, ctx, leader, "queue", "resume", "web", "--key", "tenant-x")
	harness.Eventually(t, 30*time.Second, func() error {
		do(t, bctx, chromedp.Navigate(base+"/queues/web"), chromedp.WaitVisible(chromedp.CSS(`#paused`)))
		if p := text(t, bctx, `#paused`); p != "no" || count(t, bctx, `#paused-keys`) != 0 {
			return fmt.Errorf("after resume the follower's page shows paused %q", p)
		}
		return nil
	})
}

// submit clicks the button sel and waits for the next page (not the one
// clicked on, which may hold the same words) to say want in waitSel.
func submit(t *testing.T, bctx context.Context, sel, waitSel, want string) {
	t.Helper()
	get(t, bctx, chromedp.Evaluate[bool](`window.raftqLeft = true`))
	do(t, bctx, chromedp.Click(chromedp.CSS(sel)))
	js := fmt.Sprintf(`window.raftqLeft ? "(still on the page clicked)" : ((document.querySelector(%q) || {}).textContent || "")`, waitSel)
	harness.Eventually(t, 30*time.Second, func() error {
		if got := get(t, bctx, chromedp.Evaluate[string](js)); !strings.Contains(got, want) {
			return fmt.Errorf("after clicking %s, %s says %q, want %q", sel, waitSel, got, want)
		}
		return nil
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestDashboardLoginInABrowser: with auth on, the dashboard is behind the
// styled login page; logged in with the bootstrap token (an admin) a
// page's form creates a queue (its csrf field passes the double-submit
// check), while the same POST without the field, as another site's form
// would send it, is refused and creates nothing; a viewer (browse only)
// sees the queue and is refused a purge on the page in the API's words.
func TestDashboardLoginInABrowser(t *testing.T) {
	bctx := browser(t)
	dir := t.TempDir()
	const admin = "dashboard-bootstrap-token-0123456789abcdef"
	tokFile := filepath.Join(dir, "bootstrap.token")
	if err := os.WriteFile(tokFile, []byte(admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := harness.TestNode(t, binary, "n1", "--auth", "token", "--bootstrap-token-file", tokFile)
	node.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	harness.Eventually(t, 60*time.Second, func() error {
		resp, err := http.Get("http://" + node.HTTP + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	base := "http://" + node.HTTP

	// Not logged in: the login page, styled by itself.
	do(t, bctx, chromedp.Navigate(base+"/queues"), chromedp.WaitVisible(chromedp.CSS(`form.login`)))
	if bg := get(t, bctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("form.login")).backgroundColor`)); bg != "rgb(255, 255, 255)" {
		t.Errorf("the login form is not styled: background %q", bg)
	}
	screenshot(t, bctx, "login")
	do(t, bctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), admin))
	submit(t, bctx, `form.login button`, `h1`, "Cluster")

	do(t, bctx, chromedp.Navigate(base+"/queues"), chromedp.WaitVisible(chromedp.CSS(`#create-form`)),
		chromedp.SendKeys(chromedp.CSS(`#create-name`), "secured"))
	submit(t, bctx, `#create`, `#done`, "Created queue secured.")
	// The same form without its csrf field: refused before the handler.
	status := get(t, bctx, chromedp.Evaluate[int](`fetch("/queues", {method: "POST", body: new URLSearchParams({name: "forged"})}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden {
		t.Errorf("a POST without the csrf field: %d, want 403", status)
	}
	// A viewer may look, not purge.
	md := metadata.Pairs("authorization", "Bearer "+admin)
	actx := metadata.NewOutgoingContext(ctx, md)
	ac := raftqv1.NewAuthClient(rawConn(t, node))
	tok, err := ac.CreateToken(actx, &raftqv1.CreateTokenRequest{Name: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Grant(actx, &raftqv1.GrantRequest{Identity: "viewer", Pattern: "*", Allow: []string{"browse"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := raftqv1.NewBrokerClient(rawConn(t, node)).GetQueue(actx, &raftqv1.GetQueueRequest{Name: "forged"}); err == nil {
		t.Error("the forged POST created a queue")
	}
	do(t, bctx, chromedp.Navigate(base+"/queues/secured"), chromedp.WaitVisible(chromedp.CSS(`#purge`)))
	submit(t, bctx, `#logout`, `form.login h1`, "Log in")
	do(t, bctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), tok.GetToken()))
	submit(t, bctx, `form.login button`, `h1`, "Cluster")
	do(t, bctx, chromedp.Navigate(base+"/queues/secured"), chromedp.WaitVisible(chromedp.CSS(`#purge`)))
	submit(t, bctx, `#purge`, `#confirm-detail`, "It holds 0 messages ready")
	submit(t, bctx, `#confirm`, `#action-error`, "Purge: viewer lacks")
	screenshot(t, bctx, "viewer-refused")
}
