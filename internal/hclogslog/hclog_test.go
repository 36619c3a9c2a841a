package hclogslog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := New(l, "raft").With("peer", "n2").Named("net")

	h.Info("hello", "k", 1)
	h.Trace("hidden") // below the handler's level
	if h.IsTrace() || !h.IsDebug() || h.GetLevel() != hclog.Debug {
		t.Fatalf("levels: trace %v debug %v get %v", h.IsTrace(), h.IsDebug(), h.GetLevel())
	}
	h.SetLevel(hclog.Warn)
	h.Info("dropped by SetLevel")
	h.Warn("kept")
	h.SetLevel(hclog.Trace)

	// hashicorp/raft formats some values lazily (hclog.Fmt): they are
	// printed formatted, not as the format and its arguments.
	h.Info("initial configuration", "servers", hclog.Fmt("%+v", []raft.Server{{ID: "n1", Address: "a:1"}}))
	h.Info("restore progress", "percent-complete", hclog.Fmt("%0.2f%%", 12.5))
	h.With("ctx", hclog.Fmt("%d/%d", 1, 2)).Info("implied")

	// A connection this node closed is routine, not an ERROR.
	h.Error("failed to decode incoming command", "error", fmt.Errorf("read tcp: %w", net.ErrClosed))
	h.Error("failed to decode incoming command", "error", errors.New("unexpected EOF"))

	std := h.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	std.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	std.Printf("[ERR] memberlist: boom")

	out := buf.String()
	for _, want := range []string{
		`level=INFO msg=hello logger=raft.net peer=n2 k=1`,
		`level=WARN msg=kept`,
		`level=DEBUG msg="memberlist: Stream connection from=127.0.0.1:1"`,
		`level=ERROR msg="memberlist: boom"`,
		`servers="[{Suffrage:Voter ID:n1 Address:a:1}]"`,
		`percent-complete=12.50%`,
		`ctx=1/2`,
		`level=DEBUG msg="failed to decode incoming command" logger=raft.net peer=n2 error="read tcp: use of closed network connection"`,
		`level=ERROR msg="failed to decode incoming command" logger=raft.net peer=n2 error="unexpected EOF"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, not := range []string{"hidden", "dropped", "%+v", "%0.2f"} {
		if strings.Contains(out, not) {
			t.Errorf("unexpected %q in:\n%s", not, out)
		}
	}
}
