package auth

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func httpFixture(t *testing.T) (http.Handler, *int) {
	t.Helper()
	f := stateWith(t, 0) // alice: produce on jobs.*
	h := HashOf("metrics-secret")
	for i, cmd := range []*fsmv1.Command{
		{Version: 5, NowMs: 1000, Op: &fsmv1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{Name: "prom", Identity: "prom", Sha256: h[:]}}},
		{Version: 5, NowMs: 1000, Op: &fsmv1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{Identity: "prom", Pattern: "*", Perms: uint32(fsm.PermBrowse)}}},
	} {
		if err := f.ApplyCommand(uint64(10+i), cmd).Failure(); err != nil {
			t.Fatal(err)
		}
	}
	a := New(Config{Mode: ModeToken, BootstrapToken: "boot-secret-0123456789", State: f.Reader().Auth})
	calls := 0
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if p := PrincipalFrom(r.Context()); p != nil {
			_, _ = io.WriteString(w, p.String())
		}
	})
	return a.Middleware(inner, HTTPOptions{SecureCookies: true}), &calls
}

func do(h http.Handler, method, path string, body url.Values, hdr map[string]string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	var r *http.Request
	if body != nil {
		r = httptest.NewRequest(method, path, strings.NewReader(body.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHTTPNeedsAnIdentity(t *testing.T) {
	h, calls := httpFixture(t)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for _, c := range []struct {
		path string
		hdr  map[string]string
		want int
	}{
		{"/healthz", nil, 200},
		{"/readyz", nil, 200},
		{"/metrics", nil, 401},
		{"/", nil, 401},
		{"/", map[string]string{"Accept": "text/html"}, 303}, // a browser goes to /login
		{"/", bearer("nope"), 401},
		{"/", bearer("alice-secret"), 200},
		{"/metrics", bearer("alice-secret"), 403},
		{"/metrics", bearer("metrics-secret"), 200},
		{"/metrics", bearer("boot-secret-0123456789"), 200},
		{"/status", bearer("metrics-secret"), 403},
		{"/status", bearer("boot-secret-0123456789"), 200},
		{"/debug/pprof/", bearer("alice-secret"), 403},
		{"/debug/pprof/", bearer("boot-secret-0123456789"), 200},
	} {
		before := *calls
		w := do(h, "GET", c.path, nil, c.hdr)
		if w.Code != c.want {
			t.Errorf("GET %s %v: %d %s, want %d", c.path, c.hdr, w.Code, w.Body, c.want)
		}
		if ran := *calls > before; ran != (c.want == 200) {
			t.Errorf("GET %s %v: handler ran = %v", c.path, c.hdr, ran)
		}
	}
}

func TestHTTPLoginSessionAndCSRF(t *testing.T) {
	h, calls := httpFixture(t)
	// Styled inline: the dashboard's stylesheet is behind the login.
	if w := do(h, "GET", "/login", nil, nil); w.Code != 200 || !strings.Contains(w.Body.String(), `name="token"`) || !strings.Contains(w.Body.String(), `<style>`) || !strings.Contains(w.Body.String(), `class="login"`) {
		t.Fatalf("login form: %d %s", w.Code, w.Body)
	}
	if w := do(h, "POST", "/login", url.Values{"token": {"wrong"}}, nil); w.Code != 401 || len(w.Result().Cookies()) != 0 {
		t.Fatalf("bad login: %d, cookies %v", w.Code, w.Result().Cookies())
	}
	w := do(h, "POST", "/login", url.Values{"token": {"alice-secret"}}, nil)
	if w.Code != 303 {
		t.Fatalf("login: %d", w.Code)
	}
	var session, csrf *http.Cookie
	for _, c := range w.Result().Cookies() {
		switch c.Name {
		case SessionCookie:
			session = c
		case CSRFCookie:
			csrf = c
		}
	}
	if session == nil || !session.HttpOnly || !session.Secure || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v", session)
	}
	if csrf == nil || csrf.HttpOnly || csrf.SameSite != http.SameSiteStrictMode || len(csrf.Value) < 16 {
		t.Fatalf("csrf cookie %+v", csrf)
	}
	if w := do(h, "GET", "/", nil, nil, session); w.Code != 200 || w.Body.String() != "token:alice" {
		t.Fatalf("GET with the session: %d %s", w.Code, w.Body)
	}
	before := *calls
	for _, c := range []struct {
		name string
		form url.Values
		hdr  map[string]string
		ck   []*http.Cookie
		want int
	}{
		{"no csrf", url.Values{"x": {"1"}}, nil, []*http.Cookie{session, csrf}, 403},
		{"wrong csrf", url.Values{"csrf": {"nope-nope-nope-nope"}}, nil, []*http.Cookie{session, csrf}, 403},
		{"field without the cookie", url.Values{"csrf": {csrf.Value}}, nil, []*http.Cookie{session}, 403},
		{"field", url.Values{"csrf": {csrf.Value}}, nil, []*http.Cookie{session, csrf}, 200},
		{"header", url.Values{}, map[string]string{CSRFHeader: csrf.Value}, []*http.Cookie{session, csrf}, 200},
		{"bearer needs none", url.Values{}, map[string]string{"Authorization": "Bearer alice-secret"}, nil, 200},
	} {
		if w := do(h, "POST", "/purge", c.form, c.hdr, c.ck...); w.Code != c.want {
			t.Errorf("POST %s: %d %s, want %d", c.name, w.Code, w.Body, c.want)
		}
	}
	if *calls-before != 3 {
		t.Fatalf("the handler ran %d times for 3 allowed POSTs", *calls-before)
	}
	if w := do(h, "POST", "/logout", url.Values{}, nil, session, csrf); w.Code != 403 {
		t.Fatalf("logout without csrf: %d", w.Code)
	}
	w = do(h, "POST", "/logout", url.Values{"csrf": {csrf.Value}}, nil, session, csrf)
	if w.Code != 303 {
		t.Fatalf("logout: %d", w.Code)
	}
	for _, c := range w.Result().Cookies() {
		if c.MaxAge >= 0 || c.Value != "" {
			t.Fatalf("logout left cookie %+v", c)
		}
	}
}
