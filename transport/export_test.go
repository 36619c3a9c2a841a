package transport

// What package transport_test (the in-process tests, which build their
// nodes through internal/testcluster and so cannot be in this package:
// host imports it) reaches of the package's internals. Compiled into
// the tests only.

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftq/raftq/auth"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
)

// ForwardedByKey is the metadata key a forwarded call carries.
const ForwardedByKey = forwardedByKey

// EnvelopeEndStream is the Connect envelope flag of a stream's end.
const EnvelopeEndStream = envelopeEndStream

// Push runs s's Lease delivery loop for consumer c on stream.
func Push(ctx context.Context, s *Server, stream raftqv1.Broker_LeaseServer, c *scheduler.Consumer, maxBytes int) error {
	return brokerService{Server: s}.push(ctx, s.legacy, stream, c, maxBytes)
}

// HTTPRoutes are the HTTP port's operator routes (Server.httpRoutes).
type HTTPRoutes struct {
	Mux      http.Handler    // the routes alone, without the auth middleware
	Patterns map[string]bool // what was mounted: pattern -> open
	Port     http.Handler    // the routes behind the middleware, as the port serves them
}

// HTTPRoutes mounts s's operator routes anew.
func (s *Server) HTTPRoutes() HTTPRoutes {
	r := s.httpRoutes()
	return HTTPRoutes{Mux: r.mux, Patterns: r.patterns, Port: r.handler(s.cfg.Auth, auth.HTTPOptions{})}
}

// Authenticator is what s authenticates callers with.
func (s *Server) Authenticator() *auth.Authenticator { return s.cfg.Auth }

// RPCMetrics are s's RPC counters.
type RPCMetrics struct {
	RPCs       *prometheus.CounterVec
	Latency    *prometheus.HistogramVec
	StreamedOK prometheus.Counter
}

// RPCMetrics returns s's RPC counters.
func (s *Server) RPCMetrics() RPCMetrics {
	return RPCMetrics{RPCs: s.metrics.rpcs, Latency: s.metrics.latency, StreamedOK: s.metrics.streamedOK}
}
