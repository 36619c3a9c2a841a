// Package dashboard is the operator's web UI on a node's HTTP port: the
// overview (totals, every node's memory, disk and uptime, leader, lag,
// replica agreement), the queues (depths, rates, drain estimates, depth
// sparklines with their scale, flags for queues without consumers and
// stalled consumers) and one queue at a time (fairness keys, throttle
// buckets, consumers, peek, dead letters; a DLQ's origins, reasons,
// attempts and ages). It acts as well as looks: create, update, purge and
// delete a queue, publish, get one message and ack or nack it, redrive
// (actions.go). Pages are rendered on the server from html/template; a
// little plain JavaScript draws the sparklines and reloads on request;
// templates and assets are embedded, so there is no build step.
//
// It reads and changes through a Backend: this node's own replicated
// state for the queue numbers (so a follower's page equals its
// /metrics), and the leader, as the gRPC method of the same name would,
// for what only the leader knows (consumers, key stats, peek) and for
// every change, so a dashboard user sees and does what their grants
// allow and meets the API's errors in its words. Changes are POSTs and
// every form carries a csrf field copied from the raftq_csrf cookie, so
// the auth middleware in front of the Handler checks a double-submitted
// token; purge and delete take a second, confirming POST.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Backend is what the dashboard reads and changes. Errors are gRPC
// statuses, as the API returns them.
type Backend interface {
	// NodeID is the id of the node serving the page.
	NodeID() string
	// Status is the cluster as this node sees it, with every reachable
	// node's applied index.
	Status(ctx context.Context) (*raftqv1.StatusResponse, error)
	// Verify compares the replicas' digests at one log index.
	Verify(ctx context.Context) (*raftqv1.VerifyResponse, error)
	// LocalQueues lists every queue from this node's replicated state
	// (with this node's drain estimates), and LocalQueue one of them.
	LocalQueues(ctx context.Context) ([]*raftqv1.QueueInfo, error)
	LocalQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error)
	// LeaderQueues lists the queues as the leader answers ListQueues (it
	// knows their consumers); LeaderQueue is GetQueue with keys.
	LeaderQueues(ctx context.Context) ([]*raftqv1.QueueInfo, error)
	LeaderQueue(ctx context.Context, name string) (*raftqv1.QueueInfo, error)
	ListConsumers(ctx context.Context, queue string) ([]*raftqv1.ConsumerInfo, error)
	// Peek is the Peek method (filters and after_id included).
	Peek(ctx context.Context, req *raftqv1.PeekRequest) ([]*raftqv1.Delivery, error)
	Redrive(ctx context.Context, req *raftqv1.RedriveRequest) (int64, error)

	// The changes an operator makes from the pages, each checked and served
	// as the gRPC method of the same name (the caller's grants, the
	// leader, the same validation and errors).
	CreateQueue(ctx context.Context, req *raftqv1.CreateQueueRequest) (*raftqv1.QueueInfo, error)
	UpdateQueue(ctx context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.QueueInfo, error)
	PurgeQueue(ctx context.Context, req *raftqv1.PurgeQueueRequest) (int64, error)
	DeleteQueue(ctx context.Context, req *raftqv1.DeleteQueueRequest) error
	Enqueue(ctx context.Context, req *raftqv1.EnqueueRequest) ([]string, error)
	// Get leases one message of the queue as a Lease stream with limit 1
	// would (consume permission) and holds the lease until it is settled
	// through Ack or Nack, its deadline passes or the node stops. It
	// returns nil when nothing was delivered within wait.
	Get(ctx context.Context, req *raftqv1.LeaseRequest, wait time.Duration) (*raftqv1.Delivery, error)
	// Ack and Nack settle one lease; the item's result, when not ok, is
	// the error (its code and wording as the API reports it).
	Ack(ctx context.Context, queue string, ref *raftqv1.LeaseRef) error
	Nack(ctx context.Context, queue string, item *raftqv1.NackItem) error
}

// Config tunes a Dashboard.
type Config struct {
	Backend Backend
	Logger  *slog.Logger
	// SampleInterval is how often the depth history is sampled (default 5s);
	// HistoryLen how many samples each queue keeps (default 60).
	SampleInterval time.Duration
	HistoryLen     int
	// VerifyTTL is how long a replica comparison is reused before the
	// cluster page asks for a new one (default 10s): each Verify appends
	// a log entry, and a page left reloading must not write every time.
	VerifyTTL time.Duration
	// CallTimeout bounds each backend call of a page (default 5s).
	CallTimeout time.Duration
	// StallAfter is how long a consumer that holds leases and has no
	// credit may go without an ack before its queue's page flags it as
	// stalled (default 2m).
	StallAfter time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Dashboard serves the pages; it is an http.Handler mounted at "/".
type Dashboard struct {
	cfg     Config
	b       Backend
	log     *slog.Logger
	history *History
	pages   map[string]*template.Template
	mux     *http.ServeMux
	stalls  *stallTracker

	verifyMu sync.Mutex
	verified *verifyResult
}

type verifyResult struct {
	at   time.Time
	resp *raftqv1.VerifyResponse
	err  error
}

// CSRFCookie and CSRFField are the double-submit pair an auth middleware
// checks: every form carries the cookie's value in the field.
const (
	CSRFCookie = "raftq_csrf"
	CSRFField  = "csrf"
)

// New builds a Dashboard; Run samples the depth history.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Backend == nil {
		return nil, errors.New("dashboard: no backend")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 5 * time.Second
	}
	if cfg.HistoryLen <= 0 {
		cfg.HistoryLen = 60
	}
	if cfg.VerifyTTL <= 0 {
		cfg.VerifyTTL = 10 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = 2 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Dashboard{cfg: cfg, b: cfg.Backend, log: cfg.Logger, history: NewHistory(cfg.HistoryLen), stalls: newStallTracker(cfg.StallAfter)}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	d.pages = pages
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.cluster)
	mux.HandleFunc("GET /queues", d.queues)
	mux.HandleFunc("GET /queues/{name}", d.queue)
	// Changes (actions.go): POSTs only, so the auth middleware's CSRF
	// check covers every one of them.
	mux.HandleFunc("POST /queues", d.createQueue)
	mux.HandleFunc("POST /queues/{name}/update", d.updateQueue)
	mux.HandleFunc("POST /queues/{name}/purge", d.purgeQueue)
	mux.HandleFunc("POST /queues/{name}/delete", d.deleteQueue)
	mux.HandleFunc("POST /queues/{name}/publish", d.publish)
	mux.HandleFunc("POST /queues/{name}/get", d.getMessage)
	mux.HandleFunc("POST /queues/{name}/ack", d.ack)
	mux.HandleFunc("POST /queues/{name}/nack", d.nack)
	mux.HandleFunc("POST /queues/{name}/redrive", d.redrive)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	d.mux = mux
	return d, nil
}

// ServeHTTP serves the dashboard's routes.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

// History is the depth history the sparklines draw.
func (d *Dashboard) History() *History { return d.history }

// Run samples every queue's numbers into the history each SampleInterval
// until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.SampleInterval)
	defer t.Stop()
	for {
		d.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dashboard) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
	defer cancel()
	qs, err := d.b.LocalQueues(ctx)
	if err != nil {
		d.log.Debug("dashboard: sampling queues", "err", err)
		return
	}
	d.history.Record(d.cfg.Now(), qs)
}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ms":      formatMs,
		"dur":     humanMs,
		"bytes":   formatBytes,
		"rate":    func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) },
		"pct":     func(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" },
		"qpath":   qpath,
		"preview": preview,
		"short":   func(s string) string { return s[:min(len(s), 12)] },
		"formval": func(f url.Values, k, def string) string {
			if v, ok := f[k]; ok && len(v) > 0 {
				return v[0]
			}
			return def
		},
	}
	pages := map[string]*template.Template{}
	for _, p := range []string{"cluster", "queues", "queue", "confirm", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", p, err)
		}
		pages[p] = t
	}
	return pages, nil
}

// page is what every page's layout shows.
type page struct {
	Title    string
	NodeID   string
	Leader   string
	IsLeader bool
	CSRF     string
	Scheme   string // of this request: links to other nodes' dashboards use it too
	Now      string
	Body     any
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, code int, name, title string, body any) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	p := page{Title: title, NodeID: d.b.NodeID(), CSRF: csrfToken(r), Scheme: scheme, Now: d.cfg.Now().UTC().Format(time.RFC3339), Body: body}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := d.pages[name].Execute(w, p); err != nil {
		d.log.Warn("dashboard: rendering", "page", name, "err", err)
	}
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	d.renderError(w, r, httpCode(err), status.Convert(err).Message())
}

func (d *Dashboard) renderError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	d.render(w, r, code, "error", "Error", struct {
		Code    int
		Message string
	}{code, msg})
}

// httpCode is the HTTP status a page answers with for an API error.
func httpCode(err error) int {
	code := http.StatusInternalServerError
	switch status.Code(err) {
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.Unavailable, codes.DeadlineExceeded:
		code = http.StatusServiceUnavailable
	case codes.FailedPrecondition:
		code = http.StatusConflict
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
	case codes.AlreadyExists, codes.Aborted:
		code = http.StatusConflict
	}
	return code
}

// csrfToken is the request's raftq_csrf cookie, or "" without one; the
// auth middleware, not the dashboard, decides whether a POST may pass.
func csrfToken(r *http.Request) string {
	c, err := r.Cookie(CSRFCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

func (d *Dashboard) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.cfg.CallTimeout)
}
