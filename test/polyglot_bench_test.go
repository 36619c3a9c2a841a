package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkPolyglot reports, from one run on one 3-node cluster (make
// bench-polyglot; docs/benchmarks.md): a Python worker pool's drain of a
// backlog of 1 KiB messages beside the Go SDK consumer's with the same
// settings (max_in_flight 64, 8 handlers), and unary Enqueue calls/s as
// JSON over HTTP beside gRPC, alternating rounds. Figures only: nothing
// is asserted about speed.
func BenchmarkPolyglot(b *testing.B) {
	py := os.Getenv("RAFTQ_BENCH_PYTHON")
	if py == "" {
		py = filepath.Join("..", "bin", "pyvenv", "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		b.Fatalf("no Python with the raftq client at %s (make python-venv, or set RAFTQ_BENCH_PYTHON): %v", py, err)
	}
	nodes := make([]*harness.Node, 3)
	for i := range nodes {
		nodes[i] = harness.TestNode(b, binary, fmt.Sprintf("n%d", i+1), "--log-level", "warn")
	}
	for _, n := range nodes {
		n.Args = append(n.Args, harness.JoinFlags(nodes)...)
		n.Start()
	}
	c := harness.Dial(b, nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := harness.WaitReady(ctx, c); err != nil {
		b.Fatal(err)
	}
	waitVoters(b, c, nodes[0], 3)
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var leader *harness.Node
	for _, n := range nodes {
		if n.ID == st.LeaderId {
			leader = n
		}
	}
	if leader == nil {
		b.Fatalf("no leader in %v", st)
	}
	const backlog = 20000
	payload := bytes.Repeat([]byte("x"), 1024)
	rounds := 3
	b.ResetTimer()
	for r := range rounds {
		for _, kind := range []string{"go", "python"} {
			q := fmt.Sprintf("drain-%s-%d", kind, r)
			fill(b, ctx, c, q, backlog, payload)
			var d time.Duration
			if kind == "go" {
				d = drainGo(b, ctx, c, q, backlog)
			} else {
				d = drainPython(b, ctx, c, py, nodes, q, backlog)
			}
			rate := float64(backlog) / d.Seconds()
			fmt.Printf("round %d: %-6s worker pool drained %d x 1 KiB in %v: %.0f msgs/s\n", r+1, kind, backlog, d.Round(time.Millisecond), rate)
			b.ReportMetric(rate, "msgs/s:"+kind+"-pool-r"+fmt.Sprint(r+1))
		}
	}
	if _, err := c.CreateQueue(ctx, "unary", nil); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(leader.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	const callers, window = 16, 5 * time.Second
	for r := range rounds {
		for _, kind := range []string{"grpc", "json"} {
			n := unaryRound(b, ctx, kind, conn, hc, leader.HTTP, callers, window, payload)
			rate := float64(n) / window.Seconds()
			fmt.Printf("round %d: %-4s unary Enqueue of 1 KiB, %d callers: %.0f calls/s\n", r+1, kind, callers, rate)
			b.ReportMetric(rate, "calls/s:"+kind+"-r"+fmt.Sprint(r+1))
		}
	}
}

func fill(b *testing.B, ctx context.Context, c *client.Client, q string, n int, payload []byte) {
	b.Helper()
	if _, err := c.CreateQueue(ctx, q, nil); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 250 {
		msgs := make([]*raftqv1.EnqueueMessage, 250)
		for j := range msgs {
			msgs[j] = &raftqv1.EnqueueMessage{Payload: payload}
		}
		if _, err := c.Enqueue(ctx, q, msgs...); err != nil {
			b.Fatal(err)
		}
	}
}

// waitAcked polls the queue until n are acked.
func waitAcked(b *testing.B, ctx context.Context, c *client.Client, q string, n int64) {
	b.Helper()
	err := harness.WaitFor(ctx, 5*time.Minute, 20*time.Millisecond, func(ctx context.Context) error {
		info, err := c.GetQueue(ctx, q, false)
		if err != nil {
			return err
		}
		if info.Stats.AckedTotal < n {
			return fmt.Errorf("%d of %d acked", info.Stats.AckedTotal, n)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

func drainGo(b *testing.B, ctx context.Context, c *client.Client, q string, n int) time.Duration {
	b.Helper()
	cctx, stop := context.WithCancel(ctx)
	var handled atomic.Int64
	con := client.NewConsumer(c, q, func(context.Context, *raftqv1.Delivery) error {
		handled.Add(1)
		return nil
	}, client.ConsumerOptions{MaxInFlight: 64, Concurrency: 8})
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- con.Run(cctx) }()
	waitAcked(b, ctx, c, q, int64(n))
	d := time.Since(start)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return d
}

// pythonWorker is the pool the Python client's README shows, counting
// nothing itself: the drain is timed from its "ready" line to the last ack.
const pythonWorker = `
import sys, raftq
addrs, queue = sys.argv[1], sys.argv[2]
with raftq.Client(addrs) as c:
    print("ready", flush=True)
    c.consume(queue, lambda m: None, max_in_flight=64, concurrency=8)
`

func drainPython(b *testing.B, ctx context.Context, c *client.Client, py string, nodes []*harness.Node, q string, n int) time.Duration {
	b.Helper()
	addrs := ""
	for i, nd := range nodes {
		if i > 0 {
			addrs += ","
		}
		addrs += nd.GRPC
	}
	cmd := exec.Command(py, "-c", pythonWorker, addrs, q)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Errorf("python worker: %v\n%s", err, stderr.String())
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		b.Fatalf("python worker said %q: %v\n%s", line, err, stderr.String())
	}
	start := time.Now()
	waitAcked(b, ctx, c, q, int64(n))
	return time.Since(start)
}

// unaryRound runs callers loops of one-message Enqueue calls against the
// leader for window and returns how many succeeded.
func unaryRound(b *testing.B, ctx context.Context, kind string, conn *grpc.ClientConn, hc *http.Client, httpAddr string,
	callers int, window time.Duration, payload []byte) int64 {
	b.Helper()
	broker := raftqv1.NewBrokerClient(conn)
	body := []byte(fmt.Sprintf(`{"queue":"unary","messages":[{"payload":%q}]}`, base64.StdEncoding.EncodeToString(payload)))
	url := "http://" + httpAddr + "/raftq.v1.Broker/Enqueue"
	var ok atomic.Int64
	var firstErr atomic.Value
	// Calls are not cut at the window's end (a cut call is neither a
	// success nor a failure): each caller stops starting new ones.
	end := time.Now().Add(window)
	rctx := ctx
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				var err error
				if kind == "grpc" {
					_, err = broker.Enqueue(rctx, &raftqv1.EnqueueRequest{Queue: "unary", Messages: []*raftqv1.EnqueueMessage{{Payload: payload}}})
				} else {
					err = postJSON(rctx, hc, url, body)
				}
				if err == nil {
					ok.Add(1)
				} else {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatalf("%s enqueue: %v", kind, err)
	}
	return ok.Load()
}

func postJSON(ctx context.Context, hc *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf [512]byte
	n, _ := resp.Body.Read(buf[:])
	for {
		if _, err := resp.Body.Read(buf[:]); err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, buf[:n])
	}
	return nil
}
