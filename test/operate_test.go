package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// cli runs one raftq client command against n and returns its stdout.
func cli(t *testing.T, ctx context.Context, n *harness.Node, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, append([]string{"--addr", n.GRPC}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("raftq %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestOperatorView: as an operator would, with the CLI. A consumer
// started with `consume --name` is listed by `raftq consumers`, and when
// the CLI's enqueues and consume end normally, /metrics counts their
// streams OK, not Canceled, and shows the queue's numbers.
func TestOperatorView(t *testing.T) {
	n, _ := startSingle(t)
	ctx := ctxT(t)
	cli(t, ctx, n, "queue", "create", "ops")
	cli(t, ctx, n, "enqueue", "ops", "a", "b", "c")

	consume := exec.CommandContext(ctx, binary, "--addr", n.GRPC, "consume", "ops", "--name", "cli-worker")
	var consumed bytes.Buffer
	consume.Stdout, consume.Stderr = &consumed, &consumed
	if err := consume.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = consume.Process.Kill()
			_ = consume.Wait()
		}
	})
	harness.Eventually(t, 20*time.Second, func() error {
		out := cli(t, ctx, n, "consumers", "ops")
		if !strings.Contains(out, "cli-worker") || !strings.Contains(out, "127.0.0.1:") {
			return fmt.Errorf("raftq consumers ops:\n%s", out)
		}
		if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 9 || f[7] != "3" {
			return fmt.Errorf("want 3 acked:\n%s", out)
		}
		return nil
	})
	// SIGINT is how a person stops `raftq consume`: it ends its stream.
	if err := consume.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waited = true
	if err := consume.Wait(); err != nil {
		t.Fatalf("consume: %v\n%s", err, consumed.String())
	}

	var metrics string
	harness.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + n.HTTP + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		metrics = string(b)
		if !strings.Contains(metrics, `raftq_rpc_total{code="OK",method="/raftq.v1.Broker/Lease"} 1`) {
			return fmt.Errorf("the consume stream is not counted OK yet")
		}
		return nil
	})
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "raftq_rpc_total{") && strings.Contains(line, `code="Canceled"`) {
			t.Errorf("a normal CLI call counted as Canceled: %s", line)
		}
	}
	for _, want := range []string{
		`raftq_queue_events_total{event="acked",queue="ops"} 3`,
		`raftq_queue_messages{queue="ops",state="ready"} 0`,
		`raftq_queue_consumers{queue="ops"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
