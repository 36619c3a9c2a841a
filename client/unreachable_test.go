package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// With WithFailFast a call whose every seed refuses the connection fails
// with the addresses tried, long before its deadline; without it the same
// call retries until the deadline.
func TestFailFastWhenEverySeedRefuses(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	c, err := Dial(context.Background(), []string{a, b}, WithFailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A deadline far beyond any retry schedule: reaching it would fail the
	// assertions below (DeadlineExceeded, not ErrUnreachable).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	calls := map[string]func() error{
		"unary":   func() error { _, err := c.GetQueue(ctx, "q", false); return err },
		"enqueue": func() error { _, err := c.EnqueuePayloads(ctx, "q", []byte("x")); return err },
		"consumer": func() error {
			return NewConsumer(c, "q", func(context.Context, *raftqv1.Delivery) error { return nil }, ConsumerOptions{}).Run(ctx)
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			var ue *UnreachableError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnreachable) {
				t.Fatalf("err = %v, want an UnreachableError", err)
			}
			for _, addr := range []string{a, b} {
				if !strings.Contains(err.Error(), addr) {
					t.Errorf("error %q does not name %s", err, addr)
				}
			}
			if !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("error %q does not say the connection was refused", err)
			}
		})
	}
}

// One live seed is enough: fail-fast gives up only when all refuse.
func TestFailFastUsesALiveSeed(t *testing.T) {
	live := serve(t, &fakeBroker{name: "B", rec: newRecorder()})
	c, err := Dial(context.Background(), []string{deadAddr(t), live}, WithFailFast(), WithRetryPolicy(fastRetry()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.EnqueuePayloads(ctx, "q", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// A node that answers "no leader" is not unreachable: the call keeps
// retrying it until its deadline.
func TestFailFastRetriesNodesThatAnswer(t *testing.T) {
	noLeader := func(string) error { return status.Error(codes.Unavailable, "no leader elected yet") }
	addr := serve(t, &fakeBroker{name: "A", rec: newRecorder(), unary: noLeader})
	c, err := Dial(context.Background(), []string{addr}, WithFailFast(), WithRetryPolicy(fastRetry()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.EnqueuePayloads(ctx, "q", []byte("x"))
	if errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline after retries", err)
	}
}

// Why a node could not be reached, in the user's words: gRPC's dial error
// shortened to its cause, and a name that does not resolve said so.
func TestRefusalReason(t *testing.T) {
	for msg, want := range map[string]string{
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:7400: connect: connection refused"`: "connection refused",
		`name resolver error: produced zero addresses`:                                                                    "the host name resolves to no address",
		`connection error: desc = "transport: Error while dialing: dial tcp: lookup nosuch.example: no such host"`:        "no such host",
		// A certificate error keeps its cause whole, not a fragment of
		// its parenthesis.
		`connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority (possibly because of \"x509: ECDSA verification failure\" while trying to verify candidate authority certificate \"raftq CA\")"`:                                                    "tls: failed to verify certificate: x509: certificate signed by unknown authority",
		`connection error: desc = "transport: authentication handshake failed: credentials: cannot check peer: missing selected ALPN property. If you upgraded from a grpc-go version earlier than 1.67, your TLS connections may have stopped working due to ALPN enforcement. For more details, see: https://github.com/grpc/grpc-go/issues/434"`: "the server speaks TLS but not gRPC (it did not agree to HTTP/2 by ALPN)",
		`connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`:                                                                                                                                                                                                               "tls: first record does not look like a TLS handshake",
	} {
		if got := refusalReason(msg); got != want {
			t.Errorf("refusalReason(%q) = %q, want %q", msg, got, want)
		}
	}
}
