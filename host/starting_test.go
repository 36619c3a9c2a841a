package host

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
