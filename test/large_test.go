package test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLargeMessagesThroughTheCLI is issue 11's scenario as a user runs it:
// six 1 MB lines enqueued into a queue with default settings, then
// `raftq consume mid --count 6` with default settings prints all six at
// their first attempt, and nothing reaches mid.dlq.
func TestLargeMessagesThroughTheCLI(t *testing.T) {
	n, c := startSingle(t)
	ctx := ctxT(t)
	cli := func(stdin string, args ...string) (string, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, binary, append([]string{"--addr", n.GRPC}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	if _, stderr, err := cli("", "queue", "create", "mid"); err != nil {
		t.Fatalf("queue create: %v: %s", err, stderr)
	}
	line := strings.Repeat("a", 1_000_000) + "\n"
	if _, stderr, err := cli(strings.Repeat(line, 6), "enqueue", "mid"); err != nil {
		t.Fatalf("enqueue: %v: %s", err, stderr)
	}
	if out, stderr, err := cli("", "peek", "mid"); err != nil || !strings.Contains(out, "ID") {
		t.Fatalf("peek: %v: %s", err, stderr)
	}
	out, stderr, err := cli("", "consume", "mid", "--count", "6")
	if err != nil {
		t.Fatalf("consume: %v: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("consume printed %d lines, want 6", len(lines))
	}
	for i, l := range lines {
		if f := strings.SplitN(l, "\t", 3); len(f) != 3 || f[1] != "attempt=1" || f[2] != strings.TrimSuffix(line, "\n") {
			t.Fatalf("line %d: %.80s...", i, l)
		}
	}
	dlq, err := c.GetQueue(ctx, "mid.dlq", false)
	if err != nil {
		t.Fatal(err)
	}
	if st := dlq.GetStats(); st.GetReady()+st.GetDeadLettered() != 0 {
		t.Fatalf("mid.dlq holds messages: %v", st)
	}
}
