package transport_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/host"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
)

// TestHTTPRoutesFailClosed walks every route of the HTTP port of a node
// with auth on (the dashboard's pages and assets under "/", pprof
// included) without credentials: through the port's handler each answers
// 401 (a browser is sent to /login) but /healthz and /readyz; served
// without the auth middleware (the routes' mux alone, or the Dashboard
// handler on a mux of a caller's own) each guarded route answers 401.
// Before, Dashboard() was the bare web UI: mounted without the
// middleware, it served every page to anyone. With the bootstrap token
// the same paths are not refused, so a refusal above is the guard's.
func TestHTTPRoutesFailClosed(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1, auth: auth.ModeToken, bootstrapToken: testBootstrap,
		adjust: func(_ string, c *host.Config) { c.API.Pprof = true }}) // mount every route there is
	n := c.Nodes[0]
	if _, err := n.Broker.CreateQueue(bearer(tctx(t, 10*time.Second), testBootstrap), &raftqv1.CreateQueueRequest{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	routes := n.API().HTTPRoutes()
	port := routes.Port

	// Requests per pattern: the pattern itself, and for the dashboard's
	// "/" each of its pages, a POST, an asset and a path nobody serves.
	dashboard := []string{"GET /", "GET /queues", "GET /queues/q", "GET /queues/q?peek=5&dlq=5",
		"POST /queues/q/redrive", "GET /static/app.js", "GET /no-such-page"}
	type probe struct{ method, path string }
	var probes []probe
	var patterns []string
	for p := range routes.Patterns {
		patterns = append(patterns, p)
	}
	slices.Sort(patterns)
	for _, p := range patterns {
		if p == "/" {
			for _, d := range dashboard {
				m, path, _ := strings.Cut(d, " ")
				probes = append(probes, probe{m, path})
			}
			continue
		}
		path := p
		if p == "/debug/pprof/profile" || p == "/debug/pprof/trace" {
			path += "?seconds=1" // not the default 30 s of profiling
		}
		probes = append(probes, probe{http.MethodGet, path})
	}
	if len(patterns) < 8 {
		t.Fatalf("only %d routes mounted: %v", len(patterns), patterns)
	}
	do := func(h http.Handler, pr probe, header, value string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(pr.method, pr.path, nil)
		if header != "" {
			r.Header.Set(header, value)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	open := func(path string) bool { return path == "/healthz" || path == "/readyz" }
	for _, pr := range probes {
		t.Run(pr.method+" "+pr.path, func(t *testing.T) {
			pattern, _, _ := strings.Cut(pr.path, "?")
			if open(pr.path) {
				if !routes.Patterns[pr.path] {
					t.Fatalf("%s is mounted guarded, but the middleware lets it through unauthenticated", pr.path)
				}
				if w := do(port, pr, "", ""); w.Code != http.StatusOK {
					t.Errorf("port, no credentials: %d, want 200", w.Code)
				}
				return
			}
			if routes.Patterns[pattern] {
				t.Fatalf("%s is mounted open", pattern)
			}
			if w := do(port, pr, "", ""); w.Code != http.StatusUnauthorized {
				t.Errorf("port, no credentials: %d, want 401", w.Code)
			}
			if pr.method == http.MethodGet {
				w := do(port, pr, "Accept", "text/html")
				if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
					t.Errorf("port, browser without credentials: %d to %q, want 303 to /login", w.Code, w.Header().Get("Location"))
				}
			}
			if w := do(routes.Mux, pr, "", ""); w.Code != http.StatusUnauthorized {
				t.Errorf("routes without the middleware: %d, want 401", w.Code)
			}
			if w := do(port, pr, "Authorization", "Bearer "+testBootstrap); w.Code == http.StatusUnauthorized || w.Code == http.StatusForbidden {
				t.Errorf("port, with the bootstrap token: %d %s", w.Code, w.Body)
			}
		})
	}

	// The JSON API beside the operator routes authenticates as gRPC does.
	req := httptest.NewRequest(http.MethodPost, transport.ConnectPrefix+"Broker/ListQueues", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	n.API().HTTPHandler().ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("JSON API without credentials: %d %s, want 401", w.Code, w.Body)
	}

	// The Dashboard handler on a mux of a caller's own, without the
	// middleware: refused; with it: served.
	own := http.NewServeMux()
	own.Handle("/", n.API().Dashboard())
	for _, d := range dashboard {
		m, path, _ := strings.Cut(d, " ")
		if w := do(own, probe{m, path}, "", ""); w.Code != http.StatusUnauthorized {
			t.Errorf("Dashboard() without the middleware: %s %s answered %d, want 401", m, path, w.Code)
		}
	}
	guarded := n.API().Authenticator().Middleware(own, auth.HTTPOptions{})
	if w := do(guarded, probe{http.MethodGet, "/queues"}, "Authorization", "Bearer "+testBootstrap); w.Code != http.StatusOK {
		t.Errorf("Dashboard() behind the middleware with the token: %d %s", w.Code, w.Body)
	}
}
