package main

import (
	"strings"
	"testing"
)

// TestDashboardStallAfterMustBePositive: --dashboard-stall-after 0 would
// flag every consumer that holds leases; it is refused before the node
// starts, naming the flag.
func TestDashboardStallAfterMustBePositive(t *testing.T) {
	dir := t.TempDir()
	r := runArgs(t, "serve", "--data-dir", dir, "--node-id", "n1", "--dashboard-stall-after", "0",
		"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", "")
	if r.code != 1 || !strings.Contains(r.stderr, "--dashboard-stall-after 0s: want a duration above 0") {
		t.Fatalf("serve --dashboard-stall-after 0: %+v", r)
	}
}

// TestMetricsTopKeysMustNotBeNegative: a negative --metrics-top-keys is
// refused before the node starts, naming the flag.
func TestMetricsTopKeysMustNotBeNegative(t *testing.T) {
	dir := t.TempDir()
	r := runArgs(t, "serve", "--data-dir", dir, "--node-id", "n1", "--metrics-top-keys", "-1",
		"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", "")
	if r.code != 1 || !strings.Contains(r.stderr, "--metrics-top-keys -1") {
		t.Fatalf("serve --metrics-top-keys -1: %+v", r)
	}
}
