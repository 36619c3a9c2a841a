package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/transport"
)

// TestNonLoopbackWithoutTLSRefused: secure by default. A node binding any
// non-loopback address without TLS does not start (and says why) unless
// --insecure is given; loopback needs nothing.
func TestNonLoopbackWithoutTLSRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" = allowed
	}{
		{"all interfaces", []string{"--grpc-addr", "0.0.0.0:7400"}, "refusing to bind --grpc-addr 0.0.0.0:7400 without TLS"},
		{"empty host", []string{"--raft-addr", ":7401"}, "refusing to bind --raft-addr :7401 without TLS"},
		{"a LAN address", []string{"--gossip-addr", "10.1.2.3:7402"}, "refusing to bind --gossip-addr"},
		{"http on all interfaces", []string{"--http-addr", "[::]:7403"}, "refusing to bind --http-addr"},
		{"half of TLS", []string{"--grpc-addr", "0.0.0.0:7400", "--tls-cert", "x.pem"}, "TLS needs all of --tls-cert, --tls-key and --tls-ca"},
		{"loopback", nil, ""},
		{"localhost", []string{"--grpc-addr", "localhost:7400"}, ""},
		{"--insecure", []string{"--grpc-addr", "0.0.0.0:7400", "--insecure"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &serveOptions{grpcAddr: "127.0.0.1:7400", raftAddr: "127.0.0.1:7401", gossipAddr: "[::1]:7402", httpAddr: "127.0.0.1:7403"}
			cmd := newServeCmd()
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			fl := cmd.Flags()
			for _, f := range []struct {
				name string
				dst  *string
			}{{"grpc-addr", &o.grpcAddr}, {"raft-addr", &o.raftAddr}, {"gossip-addr", &o.gossipAddr}, {"http-addr", &o.httpAddr}, {"tls-cert", &o.tls.Cert}} {
				if fl.Changed(f.name) {
					*f.dst, _ = fl.GetString(f.name)
				}
			}
			o.insecure, _ = fl.GetBool("insecure")
			err := checkBinds(o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want %q", err, tc.want)
			}
		})
	}
	// Through the command line: refused before anything is opened.
	dir := t.TempDir()
	r := runArgs(t, "serve", "--data-dir", dir, "--grpc-addr", "0.0.0.0:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", "")
	if r.code != 1 || !strings.Contains(r.stderr, "--insecure") || !strings.Contains(r.stderr, "without TLS") {
		t.Fatalf("serve on 0.0.0.0: %+v", r)
	}
}

// TestClientTLSFlagsAndEnv: every client command connects with TLS from
// --tls-ca/--tls-cert/--tls-key or RAFTQ_CLIENT_TLS_*, and never from a
// node's RAFTQ_TLS_* variables.
func TestClientTLSFlagsAndEnv(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	for _, args := range [][]string{
		{"cert", "init", "--dir", dir},
		{"cert", "node", "--dir", dir, "--name", "n1"},
		{"cert", "client", "--dir", dir, "--name", "alice"},
	} {
		if r := runArgs(t, args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	src, err := tlsconfig.Load(tlsconfig.Files{Cert: path("n1.pem"), Key: path("n1-key.pem"), CA: path("ca.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(src.ServerConfig("grpc"))))
	raftqv1.RegisterBrokerServer(srv, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	addr := lis.Addr().String()

	runEnv := func(env map[string]string, args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		full := append([]string{"--addr", addr, "--rpc-timeout", "3s"}, args...)
		code := run(ctx, full, strings.NewReader(""), &out, &errOut, func(k string) string { return env[k] })
		return result{code, out.String(), errOut.String()}
	}
	if r := runEnv(nil, "queue", "list"); r.code == 0 || !strings.Contains(r.stderr, "--tls-ca") {
		t.Fatalf("plaintext against TLS: %+v", r)
	}
	if r := runEnv(nil, "queue", "list", "--tls-ca", path("ca.pem")); r.code != 0 {
		t.Fatalf("--tls-ca: %+v", r)
	}
	// Another CA: said in those words, with the file, not as a fragment
	// of x509's explanation.
	other := filepath.Join(t.TempDir(), "other")
	if r := runArgs(t, "cert", "init", "--dir", other); r.code != 0 {
		t.Fatalf("cert init: %+v", r)
	}
	otherCA := filepath.Join(other, "ca.pem")
	if r := runEnv(nil, "queue", "list", "--tls-ca", otherCA); r.code == 0 ||
		!strings.Contains(r.stderr, "the node's certificate is not signed by the CA in --tls-ca ("+otherCA+")") || strings.Contains(r.stderr, `\"`) {
		t.Fatalf("a CA that did not sign the node's certificate: %+v", r)
	}
	if r := runEnv(nil, "queue", "list", "--tls-ca", path("ca.pem"), "--tls-cert", path("alice.pem"), "--tls-key", path("alice-key.pem")); r.code != 0 {
		t.Fatalf("client certificate flags: %+v", r)
	}
	if r := runEnv(nil, "queue", "list", "--tls-ca", path("ca.pem"), "--tls-cert", path("alice.pem")); r.code == 0 || !strings.Contains(r.stderr, "both") {
		t.Fatalf("certificate without key: %+v", r)
	}
	env := map[string]string{"RAFTQ_CLIENT_TLS_CA": path("ca.pem"), "RAFTQ_CLIENT_TLS_CERT": path("alice.pem"), "RAFTQ_CLIENT_TLS_KEY": path("alice-key.pem")}
	if r := runEnv(env, "queue", "list"); r.code != 0 {
		t.Fatalf("RAFTQ_CLIENT_TLS_*: %+v", r)
	}
	nodeEnv := map[string]string{"RAFTQ_TLS_CA": path("ca.pem"), "RAFTQ_TLS_CERT": path("n1.pem"), "RAFTQ_TLS_KEY": path("n1-key.pem")}
	if r := runEnv(nodeEnv, "queue", "list"); r.code == 0 {
		t.Fatal("a client picked up the node's RAFTQ_TLS_* variables")
	}
	if n := len(requests[*raftqv1.ListQueuesRequest](f)); n != 3 {
		t.Fatalf("%d ListQueues served, want 3", n)
	}
}

func TestGossipKeyFile(t *testing.T) {
	dir := t.TempDir()
	r1, r2 := runArgs(t, "cert", "gossip-key"), runArgs(t, "cert", "gossip-key")
	if r1.code != 0 || r2.code != 0 || r1.stdout == r2.stdout {
		t.Fatalf("gossip-key: %+v %+v", r1, r2)
	}
	write := func(s string) string {
		p := filepath.Join(dir, "keys")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys, err := readGossipKeys(write("# rotation in progress\n"+r1.stdout+"\n  "+r2.stdout), slogDiscard())
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 {
		t.Fatalf("keys %d, %v", len(keys), err)
	}
	for _, bad := range []string{"", "not base64!\n", base64.StdEncoding.EncodeToString([]byte("short")) + "\n"} {
		if _, err := readGossipKeys(write(bad), slogDiscard()); err == nil {
			t.Fatalf("%q accepted", bad)
		} else if strings.Contains(err.Error(), strings.TrimSpace(bad)) && strings.TrimSpace(bad) != "" {
			t.Fatalf("the error quotes the key: %v", err)
		}
	}
}

// --addr pointed at a node's HTTP port (plain or HTTPS) says so, with the
// gRPC address the node gives in /healthz's Raftq-Grpc-Addr header.
func TestAddrAtTheHTTPPort(t *testing.T) {
	healthz := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set(transport.GRPCAddrHeader, "127.0.0.1:7400")
		_, _ = w.Write([]byte("ok\n"))
	})
	plain := httptest.NewServer(healthz)
	defer plain.Close()
	secure := httptest.NewUnstartedServer(healthz)
	secure.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused h2 handshakes
	secure.StartTLS()
	defer secure.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	other := httptest.NewServer(http.NotFoundHandler()) // some other HTTP server
	defer other.Close()
	for _, tc := range []struct {
		name, addr string
		flags      []string
		want, not  string
	}{
		{"plain", plain.Listener.Addr().String(), nil, "is raftq's HTTP port (dashboard, /metrics), not its gRPC API, which listens on 127.0.0.1:7400: give --addr 127.0.0.1:7400", "Is a broker running there?"},
		{"https", secure.Listener.Addr().String(), []string{"--tls-ca", ca}, "is raftq's HTTP port (dashboard, /metrics), not its gRPC API, which listens on 127.0.0.1:7400", "Is a broker running there?"},
		{"not raftq", other.Listener.Addr().String(), nil, "Is a broker running there?", "raftq's HTTP port"},
	} {
		r := raftq(t, tc.addr, "", append(tc.flags, "queue", "list")...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, tc.not) {
			t.Errorf("%s: exit %d, stderr %q, want %q and not %q", tc.name, r.code, r.stderr, tc.want, tc.not)
		}
	}
}

// A plaintext client that a TLS node hangs up on sees EOF or a reset,
// whichever wins the race with its preface; both get the TLS hint, and a
// refused connection the "is a broker running" one.
func TestDescribeUnreachableHints(t *testing.T) {
	for _, tc := range []struct {
		reason, want string
	}{
		{"EOF", "give --tls-ca"},
		{"read: connection reset by peer", "give --tls-ca"},
		{"x509: certificate signed by unknown authority", "give --tls-ca"},
		{"connection refused", "Is a broker running there?"},
	} {
		got := describeError(&client.UnreachableError{Addrs: []string{"127.0.0.1:7400"}, Reasons: []string{tc.reason}})
		if !strings.Contains(got, tc.want) {
			t.Errorf("reason %q: %q lacks %q", tc.reason, got, tc.want)
		}
	}
}
