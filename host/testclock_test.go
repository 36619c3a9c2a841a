package host

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTestClockOffsetsTheWallClockAndFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := os.WriteFile(path, []byte("5m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := newTestClock(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Now().Sub(time.Now()); d < 5*time.Minute-time.Second || d > 5*time.Minute+time.Second {
		t.Fatalf("Now is %v from the wall clock, want 5m", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.watch(ctx)
	e0 := c.Elapsed()
	if err := os.WriteFile(path, []byte("-3m"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Now().After(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not follow the file to -3m within 10s")
		}
		time.Sleep(testClockPoll)
	}
	if d := c.Now().Sub(time.Now()); d < -3*time.Minute-time.Second || d > -3*time.Minute+time.Second {
		t.Fatalf("after the jump Now is %v from the wall clock, want -3m", d)
	}
	// The jump (8 minutes back) leaves the monotonic reading alone.
	if e := c.Elapsed() - e0; e < 0 || e > 10*time.Second {
		t.Fatalf("Elapsed moved by %v across the jump", e)
	}
	// A missing file is no offset; a bad one is refused at start.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if d, err := readClockOffset(path); err != nil || d != 0 {
		t.Fatalf("missing file: %v, %v; want 0, nil", d, err)
	}
	if err := os.WriteFile(path, []byte("soon"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newTestClock(path, log); err == nil {
		t.Fatal("a file that is no duration was accepted")
	}
}
