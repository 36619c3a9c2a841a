package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/raftq/raftq/auth"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/tlsconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

type metrics struct {
	rpcs      *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	delivered prometheus.Counter
	// streamedReqs counts EnqueueStream requests by code; streamedOK is
	// its OK child, resolved once because it is bumped per message.
	streamedReqs *prometheus.CounterVec
	streamedOK   prometheus.Counter
	// perMethod holds each of our unary methods' latency and OK-count
	// children, resolved once: looking labels up on every call was ~6 % of
	// a busy leader's CPU. Read-only after newMetrics.
	perMethod map[string]methodMetrics
	// stopping is the server's: streams it ends itself keep their code.
	stopping <-chan struct{}
}

type methodMetrics struct {
	latency prometheus.Observer
	ok      prometheus.Counter
}

func (m *metrics) streamed(code codes.Code) {
	if code == codes.OK {
		m.streamedOK.Inc()
		return
	}
	m.streamedReqs.WithLabelValues(code.String()).Inc()
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftq_rpc_total", Help: "gRPC calls served, by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "raftq_rpc_duration_seconds", Help: "Unary gRPC call latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftq_deliveries_total", Help: "Deliveries pushed on Lease streams by this node.",
		}),
		streamedReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftq_enqueue_stream_requests_total", Help: "Enqueue requests served on EnqueueStream streams, by status code.",
		}, []string{"code"}),
		stopping: s.stopping,
	}
	m.streamedOK = m.streamedReqs.WithLabelValues(codes.OK.String())
	m.perMethod = make(map[string]methodMetrics, len(unaryMethods))
	for name := range unaryMethods {
		m.perMethod[name] = methodMetrics{
			latency: m.latency.WithLabelValues(name),
			ok:      m.rpcs.WithLabelValues(name, codes.OK.String()),
		}
	}
	reg.MustRegister(m.rpcs, m.latency, m.delivered, m.streamedReqs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftq_is_leader", Help: "1 if this node is the Raft leader."}, func() float64 {
			if s.legacy.raft.IsLeader() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftq_applied_index", Help: "Last Raft index applied to the state machine."}, func() float64 {
			return float64(s.legacy.state.AppliedIndex())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftq_queued_bytes", Help: "What the messages held across queues cost: payload, headers, keys, ids and a per-message overhead (docs/api.md, Admission)."}, func() float64 {
			return float64(s.legacy.state.TotalBytes())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftq_held_bytes", Help: "What counts against the cluster setting max_queued_bytes: messages, dedup entries and recently settled outcomes."}, func() float64 {
			held, _ := s.legacy.state.Held()
			return float64(held)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftq_max_queued_bytes", Help: "The cluster setting max_queued_bytes (0 = unlimited, or not yet a setting below log version 9)."}, func() float64 {
			_, set := s.legacy.state.Held()
			return float64(set.MaxQueuedBytes)
		}),
	)
	registerNodeMetrics(reg, s)
	if s.cfg.TLS != nil {
		registerTLSMetrics(reg, s.cfg.TLS)
	}
	return m
}

// observeUnary counts a unary call of method that started at start and
// ended with err, and observes its latency.
func (m *metrics) observeUnary(method string, start time.Time, err error) {
	mm, known := m.perMethod[method]
	if !known { // health, reflection
		mm.latency = m.latency.WithLabelValues(method)
	}
	mm.latency.Observe(time.Since(start).Seconds())
	if known && err == nil {
		mm.ok.Inc()
	} else {
		m.rpcs.WithLabelValues(method, status.Code(err).String()).Inc()
	}
}

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	code := status.Code(err)
	if m.clientEnded(ss.Context(), code) {
		// The client cancelled or closed the stream: that is how a
		// consumer or a CLI enqueue ends normally, not a failure.
		code = codes.OK
	}
	m.rpcs.WithLabelValues(info.FullMethod, code.String()).Inc()
	return err
}

// clientEnded reports whether a stream that ended with code was ended by
// its client: its context was cancelled (not timed out) while this server
// was not stopping, and the handler reported just that (Canceled, or
// Unknown for the raw error of a send to a departed client).
func (m *metrics) clientEnded(ctx context.Context, code codes.Code) bool {
	if code != codes.Canceled && code != codes.Unknown {
		return false
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		return false
	}
	select {
	case <-m.stopping:
		return false
	default:
		return true
	}
}

// GRPCAddrHeader, on every /healthz answer, is the node's client gRPC
// address: /healthz needs no credentials, so a client that reached the
// HTTP port by mistake can say where the API is.
const GRPCAddrHeader = "Raftq-Grpc-Addr"

// HTTPHandler serves the JSON API at ConnectPrefix paths (connect.go),
// /metrics (Prometheus), /healthz (the process is up),
// /readyz (a leader is known and this node's state has not diverged),
// /status (cluster status as JSON), with
// Config.Pprof /debug/pprof and, at every other path, the dashboard
// (Dashboard). With auth on every path but /healthz and /readyz needs an
// identity (auth's Middleware states the contract, login and
// CSRF included, that handlers added here rely on).
func (s *Server) HTTPHandler() http.Handler {
	operator := s.httpRoutes().handler(s.cfg.Auth, auth.HTTPOptions{SecureCookies: s.cfg.HTTPSecure})
	// The JSON API (connect.go) authenticates as gRPC does, never by the
	// session cookie, so it stays outside the operator middleware.
	api := s.connectHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, ConnectPrefix) {
			api.ServeHTTP(w, r)
			return
		}
		operator.ServeHTTP(w, r)
	})
}

// httpRoutes mounts every operator route of the HTTP port (all but the
// JSON API); a new one goes here, through guarded unless it must answer
// without an identity.
func (s *Server) httpRoutes() *httpRoutes {
	r := newHTTPRoutes()
	r.guarded("/", s.dash)
	r.guarded("/metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	if s.cfg.Pprof {
		// Profiling on the operator port: what dominates the leader under
		// load. Off by default: a profile shows memory and call paths.
		r.guarded("/debug/pprof/", http.HandlerFunc(pprof.Index))
		r.guarded("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		r.guarded("/debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
		r.guarded("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
	}
	grpcAddr := s.legacy.node.ClientGRPCAddr()
	r.open("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// A client that dialled this port for gRPC learns what it
		// reached and where to go instead (raftq's CLI asks here when a
		// connection is answered in HTTP/1.1).
		w.Header().Set(GRPCAddrHeader, grpcAddr)
		_, _ = w.Write([]byte("ok\n"))
	}))
	r.open("/readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s.legacy.raft.Leadership().LeaderID == "" {
			http.Error(w, "no leader", http.StatusServiceUnavailable)
			return
		}
		if s.legacy.raft.Corrupt() != nil {
			http.Error(w, "this node's Raft state is corrupt: repair from its peers pending", http.StatusServiceUnavailable)
			return
		}
		if s.Diverged() {
			http.Error(w, "this node's state diverged from the replicas': repair pending", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	r.guarded("/status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, _ := (&clusterService{s: s}).Status(r.Context(), &raftqv1.StatusRequest{})
		// The same JSON as `raftq cluster status --json`: protojson with
		// the .proto field names and zero values present (docs/api.md).
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(st)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	}))
	return r
}

// httpRoutes is the HTTP port's mux, built so that no handler on it
// answers a caller the auth middleware did not identify. A route is
// mounted either guarded, behind requirePrincipal, or open (only what the
// middleware lets through unauthenticated: /healthz, /readyz), and the
// one handler made of the routes is the mux inside the middleware. A
// guarded handler that ends up served without the middleware (mounted on
// another mux, or the mux served alone) then refuses every request
// instead of serving it unguarded, as the dashboard once would have
// (TestHTTPRoutesFailClosed).
type httpRoutes struct {
	mux *http.ServeMux
	// patterns lists what was mounted, open or not, for the test that
	// walks every route.
	patterns map[string]bool // pattern -> open
}

func newHTTPRoutes() *httpRoutes {
	return &httpRoutes{mux: http.NewServeMux(), patterns: map[string]bool{}}
}

func (r *httpRoutes) guarded(pattern string, h http.Handler) {
	r.mux.Handle(pattern, requirePrincipal(h))
	r.patterns[pattern] = false
}

func (r *httpRoutes) open(pattern string, h http.Handler) {
	r.mux.Handle(pattern, h)
	r.patterns[pattern] = true
}

// handler is the routes behind a's middleware: the only way they are
// served.
func (r *httpRoutes) handler(a *auth.Authenticator, o auth.HTTPOptions) http.Handler {
	return a.Middleware(r.mux, o)
}

// requirePrincipal fails closed: a request that reaches h without the
// identity the auth middleware puts in its context (with auth off, the
// anonymous admin) is refused with 401 before h runs.
func requirePrincipal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth.PrincipalFrom(r.Context()) == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftq"`)
			http.Error(w, "no identity: this handler answers only behind the auth middleware", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// registerTLSMetrics exports when the node's certificate and its CA
// expire, read from the material in use at each scrape (so a reload shows
// at once): alert well before either.
func registerTLSMetrics(reg *prometheus.Registry, src *tlsconfig.Source) {
	g := prometheus.NewDesc("raftq_tls_cert_not_after_timestamp_seconds",
		"When the certificate in use expires (Unix seconds): cert=\"node\" is this node's certificate, cert=\"ca\" the CA that signed it.",
		[]string{"cert"}, nil)
	reg.MustRegister(collectorFunc{desc: g, collect: func(ch chan<- prometheus.Metric) {
		node, ca := src.NotAfter()
		ch <- prometheus.MustNewConstMetric(g, prometheus.GaugeValue, float64(node.Unix()), "node")
		ch <- prometheus.MustNewConstMetric(g, prometheus.GaugeValue, float64(ca.Unix()), "ca")
	}})
}

// collectorFunc is a collector of one metric family computed at scrape.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// Dashboard is the web UI alone, for a caller that puts its own auth
// middleware (Config.Auth's) in front of it. It fails closed: without the
// identity that middleware sets, every request is refused with 401.
func (s *Server) Dashboard() http.Handler { return requirePrincipal(s.dash) }
