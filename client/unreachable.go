package client

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// ErrUnreachable is wrapped by the error of a call made with WithFailFast
// when every node the client knows refused the connection.
var ErrUnreachable = errors.New("no node reachable")

// UnreachableError lists the addresses a fail-fast call tried and why each
// could not be reached.
type UnreachableError struct {
	// Addrs are the addresses tried, in the order first tried.
	Addrs []string
	// Reasons[i] is why Addrs[i] could not be reached.
	Reasons []string
}

func (e *UnreachableError) Error() string {
	parts := make([]string, len(e.Addrs))
	for i, a := range e.Addrs {
		parts[i] = a + " (" + e.Reasons[i] + ")"
	}
	return fmt.Sprintf("%v: tried %s", ErrUnreachable, strings.Join(parts, ", "))
}

func (e *UnreachableError) Unwrap() error { return ErrUnreachable }

// refusals collects, for one call, the nodes whose connection failed
// outright (refused, no route, unknown host): a node that answered, even
// with an error, or that is slow, is not one.
type refusals struct {
	addrs, reasons []string
}

// note records addr if err says its connection could not be made; cc is
// the connection the attempt used.
func (r *refusals) note(addr string, cc *grpc.ClientConn, err error) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || errorInfo(err) != nil {
		return
	}
	if cc.GetState() != connectivity.TransientFailure {
		return
	}
	if slices.Contains(r.addrs, addr) {
		return
	}
	r.addrs = append(r.addrs, addr)
	r.reasons = append(r.reasons, refusalReason(st.Message()))
}

// all reports whether every one of known has refused.
func (r *refusals) all(known []string) bool {
	if len(known) == 0 {
		return false
	}
	for _, a := range known {
		if !slices.Contains(r.addrs, a) {
			return false
		}
	}
	return true
}

func (r *refusals) err() error {
	return &UnreachableError{Addrs: slices.Clone(r.addrs), Reasons: slices.Clone(r.reasons)}
}

// refusalReason shortens gRPC's connection error ("connection error: desc =
// \"transport: Error while dialing: dial tcp 127.0.0.1:7400: connect:
// connection refused\"") to its last clause. A failed TLS handshake keeps
// its whole cause ("tls: failed to verify certificate: x509: certificate
// signed by unknown authority"), whose last clause alone is a fragment.
func refusalReason(msg string) string {
	msg = strings.TrimRight(msg, `"`)
	const handshake = "authentication handshake failed: "
	if i := strings.Index(msg, handshake); i >= 0 {
		msg = msg[i+len(handshake):]
		if strings.Contains(msg, "missing selected ALPN property") {
			// grpc-go's words for a TLS server that is not gRPC (an
			// HTTPS port), with an upgrade note that does not apply.
			return "the server speaks TLS but not gRPC (it did not agree to HTTP/2 by ALPN)"
		}
		// x509 adds "(possibly because of ...)" detail from inside the
		// chain check; the cause before it is what a person acts on.
		if j := strings.Index(msg, " (possibly because of"); j >= 0 {
			msg = msg[:j]
		}
		return strings.ReplaceAll(msg, `\"`, `"`)
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if msg == "produced zero addresses" {
		// gRPC's resolver's words for a host name that does not resolve.
		return "the host name resolves to no address"
	}
	return msg
}

// knownAddrs is every address the pool may send a call to.
func (p *pool) knownAddrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seeds)
}
