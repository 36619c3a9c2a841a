package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStartingHandler: while the node restores its state the operator port
// says alive but not ready; once the node's handler is installed it answers
// everything.
func TestStartingHandler(t *testing.T) {
	h := &startingHandler{}
	node := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("node " + r.URL.Path)) })
	for _, tc := range []struct {
		ready    bool
		path     string
		code     int
		contains string
	}{
		{false, "/healthz", http.StatusOK, "starting"},
		{false, "/readyz", http.StatusServiceUnavailable, "restoring state"},
		{false, "/metrics", http.StatusServiceUnavailable, "restoring state"},
		{true, "/healthz", http.StatusOK, "node /healthz"},
		{true, "/readyz", http.StatusOK, "node /readyz"},
	} {
		if tc.ready {
			h.ready(node)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.contains) {
			t.Errorf("ready=%v %s: %d %q, want %d containing %q", tc.ready, tc.path, rec.Code, rec.Body.String(), tc.code, tc.contains)
		}
	}
}

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
