package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/tlsconfig"
)

// The HTTP side (the operator port: metrics, status, pprof, the
// dashboard) and the contract a handler on it relies on:
//
//   - /healthz and /readyz are open. Every other path needs an identity:
//     `Authorization: Bearer TOKEN`, a client certificate (over TLS), or
//     the session cookie the login form sets. Without one a browser (GET
//     asking for HTML) is sent to /login, anything else gets 401.
//   - /login (GET: a form; POST: field "token") checks the token and sets
//     two cookies: SessionCookie (the token itself; HttpOnly,
//     SameSite=Strict, Secure over TLS, Path=/) and CSRFCookie (a random
//     value, readable by the page; SameSite=Strict). POST /logout clears
//     both. The session lasts as long as the token: revoking the token
//     ends every session that uses it, on every node.
//   - A request authenticated by the session cookie that changes anything
//     (any method but GET, HEAD, OPTIONS) must carry the CSRF cookie's
//     value in the form field "csrf" or the header "X-CSRF-Token" (double
//     submit); the middleware refuses it with 403 otherwise, before the
//     handler runs. Requests with a bearer header need no CSRF value (a
//     browser never adds that header by itself). A dashboard page puts
//     CSRFToken(r) into a hidden field of each form it renders.
//   - Handlers find the caller with PrincipalFrom(r.Context()) and decide
//     with Authenticator.Allowed / IsAdmin, exactly as the gRPC methods
//     do (e.g. browse on a queue to show its messages, manage to purge).
//     With auth off the principal is an anonymous admin.
//   - /metrics needs admin or browse on every queue (a grant on '*');
//     /status and /debug/pprof need admin.

// Cookie and field names of the login session and its CSRF protection.
const (
	SessionCookie = "raftq_session"
	CSRFCookie    = "raftq_csrf"
	CSRFField     = "csrf"
	CSRFHeader    = "X-CSRF-Token"
)

// HTTPOptions tune the middleware.
type HTTPOptions struct {
	// SecureCookies marks the cookies Secure (the port serves TLS).
	SecureCookies bool
}

// Middleware authenticates every request to next except /healthz and
// /readyz, serves /login and /logout, enforces CSRF protection for
// cookie-authenticated changes and the admin-only paths (see the package
// comment above).
func (a *Authenticator) Middleware(next http.Handler, o HTTPOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz":
			next.ServeHTTP(w, r)
			return
		case "/login":
			a.login(w, r, o)
			return
		case "/logout":
			a.logout(w, r, o)
			return
		}
		p, byCookie, err := a.authenticateHTTP(r)
		if err != nil {
			if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") && a.Enabled() {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftq"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if byCookie && !safeMethod(r.Method) && !csrfOK(r) {
			http.Error(w, "missing or wrong CSRF token (send the raftq_csrf cookie's value as form field csrf or header X-CSRF-Token)", http.StatusForbidden)
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/debug/pprof"), r.URL.Path == "/status":
			if !a.IsAdmin(p) {
				http.Error(w, p.Name+" lacks the admin permission", http.StatusForbidden)
				return
			}
		case r.URL.Path == "/metrics":
			if !a.IsAdmin(p) && !a.Allowed(p, fsm.PermBrowse, "*") {
				http.Error(w, p.Name+" lacks the admin permission or browse on every queue ('*')", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

type httpError string

func (e httpError) Error() string { return string(e) }

// authenticateHTTP finds the caller of a request: a bearer header, a
// client certificate, or the session cookie (byCookie).
func (a *Authenticator) authenticateHTTP(r *http.Request) (p *Principal, byCookie bool, err error) {
	if a.mode == ModeNone {
		return &Principal{Name: "anonymous", Kind: KindAnonymous, admin: true}, false, nil
	}
	if a.mode == ModeToken {
		if tok, ok := bearerFrom(r.Header.Get("Authorization")); ok {
			p, err := a.token(tok)
			return p, false, err
		}
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		leaf := r.TLS.PeerCertificates[0]
		if node, ok := tlsconfig.NodeName(leaf); ok {
			return &Principal{Name: node, Kind: KindNode, admin: true}, false, nil
		}
		p, err := a.certificate(leaf)
		return p, false, err
	}
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" && a.mode == ModeToken {
		p, err := a.token(c.Value)
		return p, true, err
	}
	return nil, false, httpError("no credentials: send 'Authorization: Bearer TOKEN', a client certificate, or log in at /login")
}

// csrfOK is the double-submit check: the CSRF cookie's value, repeated
// in the form field or the header.
func csrfOK(r *http.Request) bool {
	c, err := r.Cookie(CSRFCookie)
	if err != nil || len(c.Value) < 16 {
		return false
	}
	sent := r.Header.Get(CSRFHeader)
	if sent == "" {
		sent = r.PostFormValue(CSRFField)
	}
	return sent != "" && subtle.ConstantTimeCompare([]byte(sent), []byte(c.Value)) == 1
}

// CSRFToken is the value a page puts into its forms' CSRFField.
func CSRFToken(r *http.Request) string {
	if c, err := r.Cookie(CSRFCookie); err == nil {
		return c.Value
	}
	return ""
}

// loginPage is styled inline: the dashboard's stylesheet is behind the
// login it would style.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>raftq: log in</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d232b; background: #f7f8fa; }
header { padding: .6em 1.2em; background: #1d2b3a; color: #fff; font-weight: 700; letter-spacing: .05em; }
main { display: flex; justify-content: center; padding-top: 12vh; }
form.login { background: #fff; box-shadow: 0 1px 3px #0002; border-radius: 6px; padding: 1.6em 2em; width: 22em; display: flex; flex-direction: column; gap: .8em; }
form.login h1 { font-size: 18px; margin: 0; }
form.login label { display: flex; flex-direction: column; gap: .3em; color: #6b7480; font-size: 12px; }
form.login input { font: inherit; border: 1px solid #c9d0d8; border-radius: 3px; padding: .45em .6em; }
form.login button { font: inherit; background: #2563eb; color: #fff; border: 0; border-radius: 3px; padding: .5em; cursor: pointer; }
form.login button:hover { background: #1d4ed8; }
form.login small { color: #6b7480; }
.alert { color: #b42318; background: #fdecea; border: 1px solid #f1b2ab; padding: .4em .7em; border-radius: 3px; margin: 0; }
</style></head>
<body><header>raftq</header>
<main><form method="post" action="/login" class="login">
<h1>Log in to the dashboard</h1>
{{if .}}<p role="alert" class="alert">{{.}}</p>{{end}}
<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Log in</button>
<small>A bearer token from <code>raftq auth token create</code> (or the bootstrap token). What you may see and do is what its grants allow.</small>
</form></main></body></html>
`))

func (a *Authenticator) login(w http.ResponseWriter, r *http.Request, o HTTPOptions) {
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, "")
		return
	case http.MethodPost:
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
		return
	}
	if a.mode != ModeToken {
		http.Error(w, "this node does not take tokens (--auth "+string(a.mode)+")", http.StatusBadRequest)
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	p, err := a.token(tok)
	if tok == "" || err != nil {
		a.log.Warn("audit", "identity", "", "kind", "", "action", "Login", "service", "HTTP", "target", "", "result", "Unauthenticated", "remote", r.RemoteAddr)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_ = loginPage.Execute(w, "That token is not valid.")
		return
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		http.Error(w, "cannot draw a CSRF token", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: tok, Path: "/", HttpOnly: true, Secure: o.SecureCookies, SameSite: http.SameSiteStrictMode})
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: base64.RawURLEncoding.EncodeToString(raw[:]), Path: "/", Secure: o.SecureCookies, SameSite: http.SameSiteStrictMode})
	a.log.Info("audit", "identity", p.Name, "kind", string(p.Kind), "action", "Login", "service", "HTTP", "target", "", "result", "OK", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (a *Authenticator) logout(w http.ResponseWriter, r *http.Request, o HTTPOptions) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST", http.StatusMethodNotAllowed)
		return
	}
	if _, err := r.Cookie(SessionCookie); err == nil && !csrfOK(r) {
		http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
		return
	}
	for _, name := range []string{SessionCookie, CSRFCookie} {
		http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: name == SessionCookie, Secure: o.SecureCookies, SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
