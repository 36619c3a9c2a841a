package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// docsCurlLines are the lines of docs/api.md's JSON-over-HTTP example,
// less its two settings (H, the node's HTTP address, and A, curl's TLS and
// token options), which the test gives.
func docsCurlLines(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- json-over-http: begin -->")
	block, _, ok2 := strings.Cut(rest, "<!-- json-over-http: end -->")
	if !ok || !ok2 {
		t.Fatal("docs/api.md has no json-over-http block")
	}
	var lines []string
	settings := 0
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
		case strings.HasPrefix(l, "H="), strings.HasPrefix(l, "A="):
			settings++
		default:
			lines = append(lines, l)
		}
	}
	if settings != 2 || len(lines) < 8 {
		t.Fatalf("unexpected json-over-http block:\n%s", block)
	}
	return strings.Join(lines, "\n")
}

// TestDocsCurlLines runs docs/api.md's curl lines, exactly, against a
// node: create, enqueue, peek, get, then a one-message lease held open in
// the background while a second curl acks its delivery; and the same on a
// TLS node with a token. The message must end acked once, nothing left.
func TestDocsCurlLines(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed (make test-tools installs it)")
	}
	script := docsCurlLines(t)
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls-and-token", true}} {
		t.Run(tc.name, func(t *testing.T) {
			n := harness.TestNode(t, binary, "n1")
			h, a := "http://"+n.HTTP, "A=()"
			if tc.tls {
				p, err := harness.NewTLS(binary, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				if err := n.UseTLS(p); err != nil {
					t.Fatal(err)
				}
				h = "https://" + n.HTTP
				a = fmt.Sprintf("A=(--cacert %s -H \"Authorization: Bearer %s\")", p.CAFile(), p.Token)
			}
			n.Start()
			c := harness.Dial(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if err := harness.WaitReady(ctx, c); err != nil {
				t.Fatal(err)
			}
			out := runBash(t, ctx, "H="+h+"\n"+a+"\n"+script)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			want := []string{`"queue":`, `"message_ids":`, `"messages":`, `"stats":`, `"ok":true`}
			if len(lines) != len(want) {
				t.Fatalf("want %d answers, got:\n%s", len(want), out)
			}
			for i, w := range want {
				if !strings.Contains(strings.ReplaceAll(lines[i], " ", ""), w) || strings.HasPrefix(lines[i], `{"code"`) {
					t.Fatalf("answer %d: %s, want one with %s", i+1, lines[i], w)
				}
			}
			harness.Eventually(t, 10*time.Second, func() error {
				q, err := c.GetQueue(ctx, "jobs", false)
				if err != nil {
					return err
				}
				if st := q.Stats; st.EnqueuedTotal != 1 || st.AckedTotal != 1 || st.Ready != 0 || st.InFlight != 0 || st.Consumers != 0 {
					return fmt.Errorf("stats %v", st)
				}
				return nil
			})
		})
	}
}

// runBash runs script with bash in a temp dir and returns its stdout; a
// script still running at ctx's end is killed with its children.
func runBash(t *testing.T, ctx context.Context, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("script did not finish\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	return stdout.String()
}
