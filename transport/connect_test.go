package transport_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/auth"
	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/tlsconfig"
	"github.com/raftq/raftq/tlsconfig/pki"
	"github.com/raftq/raftq/transport"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// httpAPI serves n's HTTP port (over TLS when the node has it, as serve
// does) and is a client of it.
type httpAPI struct {
	base   string
	client *http.Client
}

func serveHTTPPort(t *testing.T, n *testcluster.Node, clientTLS *tls.Config) *httpAPI {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if n.Host.TLS() != nil {
		lis = tls.NewListener(lis, n.Host.TLS().ServerConfig("http"))
		scheme = "https"
	}
	hs := &http.Server{Handler: n.API().HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(lis) }()
	tr := &http.Transport{TLSClientConfig: clientTLS}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = hs.Close()
		<-done
	})
	return &httpAPI{base: scheme + "://" + lis.Addr().String(), client: &http.Client{Transport: tr}}
}

// call POSTs body as JSON to method ("Broker/Enqueue") with headers hdr
// ("Name: value" each) and returns the status and body.
func (h *httpAPI) call(t *testing.T, method, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.base+"/raftq.v1."+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, kv := range hdr {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// ok calls method, fails unless it answers 200, and decodes the answer.
func (h *httpAPI) ok(t *testing.T, method, body string, out proto.Message, hdr ...string) {
	t.Helper()
	code, b := h.call(t, method, body, hdr...)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, body, code, b)
	}
	if err := protojson.Unmarshal(b, out); err != nil {
		t.Fatalf("%s answered %s: %v", method, b, err)
	}
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type  string          `json:"type"`
		Value string          `json:"value"`
		Debug json.RawMessage `json:"debug"`
	} `json:"details"`
}

func decodeWireError(t *testing.T, b []byte) wireError {
	t.Helper()
	var e wireError
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not a Connect error: %s: %v", b, err)
	}
	return e
}

// errorInfoOf decodes the ErrorInfo detail of e from its protobuf bytes.
func errorInfoOf(t *testing.T, e wireError) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range e.Details {
		if d.Type != "google.rpc.ErrorInfo" {
			continue
		}
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail value %q: %v", d.Value, err)
		}
		var info errdetails.ErrorInfo
		if err := proto.Unmarshal(raw, &info); err != nil {
			t.Fatal(err)
		}
		return &info
	}
	t.Fatalf("no ErrorInfo in %+v", e)
	return nil
}

// TestConnectUnary: every unary call shape the docs show, through a
// follower (which forwards, as for gRPC) and the leader, answers the
// proto's JSON with its field names; bad requests get the Connect error
// with the gRPC code and the matching HTTP status, and change nothing.
func TestConnectUnary(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2})
	l, f := c.Leader(), c.Followers()[0]
	fh, lh := serveHTTPPort(t, f, nil), serveHTTPPort(t, l, nil)

	var created raftqv1.CreateQueueResponse
	fh.ok(t, "Broker/CreateQueue", `{"name":"jobs","config":{"max_deliveries":3}}`, &created)
	if created.Queue.GetName() != "jobs" || created.Queue.GetConfig().GetMaxDeliveries() != 3 {
		t.Fatalf("created %v", created.Queue)
	}
	var enq raftqv1.EnqueueResponse
	fh.ok(t, "Broker/Enqueue", `{"queue":"jobs","messages":[{"payload":"aGVsbG8=","dedup_id":"a"},{"payload":"d29ybGQ=","priority":2}]}`, &enq)
	if len(enq.MessageIds) != 2 {
		t.Fatalf("enqueue answered %v", enq.MessageIds)
	}
	var peek raftqv1.PeekResponse
	lh.ok(t, "Broker/Peek", `{"queue":"jobs","limit":10}`, &peek)
	if len(peek.Messages) != 2 || string(peek.Messages[0].Payload) != "world" || peek.Messages[0].Id != enq.MessageIds[1] {
		t.Fatalf("peek answered %v", peek.Messages)
	}
	// The answer uses the .proto's names with zero values present.
	code, raw := lh.call(t, "Broker/GetQueue", `{"name":"jobs"}`)
	if code != 200 || !strings.Contains(string(raw), `"enqueued_total"`) || !strings.Contains(string(raw), `"in_flight"`) {
		t.Fatalf("GetQueue: %d %s", code, raw)
	}
	var st raftqv1.StatusResponse
	fh.ok(t, "Cluster/Status", `{}`, &st)
	if st.LeaderId != l.ID || len(st.Nodes) != 2 {
		t.Fatalf("status %v", &st)
	}
	var st2 raftqv1.StatusResponse
	fh.ok(t, "Cluster/Status", ``, &st2) // an empty body is the empty request

	for _, tc := range []struct {
		name, method, contentType, body string
		httpMethod                      string
		wantHTTP                        int
		wantCode, wantIn                string
	}{
		{"unknown queue", "Broker/GetQueue", "application/json", `{"name":"nope"}`, "POST", 404, "not_found", "nope"},
		{"exists", "Broker/CreateQueue", "application/json", `{"name":"jobs"}`, "POST", 409, "already_exists", "jobs"},
		{"bad name", "Broker/Enqueue", "application/json", `{"queue":"a b","messages":[{"payload":""}]}`, "POST", 400, "invalid_argument", "queue"},
		{"unknown field", "Broker/GetQueue", "application/json", `{"nam":"jobs"}`, "POST", 400, "invalid_argument", `unknown field "nam"`},
		{"not json", "Broker/GetQueue", "application/json", `name=jobs`, "POST", 400, "invalid_argument", "GetQueueRequest"},
		{"wrong content type", "Broker/GetQueue", "text/plain", `{"name":"jobs"}`, "POST", 415, "unimplemented", "application/json"},
		{"stream as unary", "Broker/Lease", "application/json", `{"queue":"jobs"}`, "POST", 415, "unimplemented", "application/connect+json"},
		{"GET", "Broker/GetQueue", "application/json", ``, "GET", 405, "unimplemented", "POST"},
		{"client stream", "Broker/EnqueueStream", "application/json", `{}`, "POST", 501, "unimplemented", "EnqueueStream"},
		{"admin-only cluster RPC", "Cluster/RemoveNode", "application/json", `{"id":"n1"}`, "POST", 501, "unimplemented", "RemoveNode"},
		{"bad timeout", "Broker/GetQueue", "application/json", `{"name":"jobs"}`, "POST", 400, "invalid_argument", "Connect-Timeout-Ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.httpMethod, fh.base+"/raftq.v1."+tc.method, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			if tc.name == "bad timeout" {
				req.Header.Set("Connect-Timeout-Ms", "soon")
			}
			resp, err := fh.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e := decodeWireError(t, b)
			if resp.StatusCode != tc.wantHTTP || e.Code != tc.wantCode || !strings.Contains(e.Message, tc.wantIn) {
				t.Fatalf("%d %s, want %d %s naming %q", resp.StatusCode, b, tc.wantHTTP, tc.wantCode, tc.wantIn)
			}
		})
	}
	var after raftqv1.GetQueueResponse
	lh.ok(t, "Broker/GetQueue", `{"name":"jobs"}`, &after)
	if after.Queue.Stats.Ready != 2 || after.Queue.Config.MaxDeliveries != 3 {
		t.Fatalf("the refused calls changed the queue: %v", after.Queue)
	}
}

// leaseStream is an open Lease server stream over HTTP.
type leaseStream struct {
	body   io.ReadCloser
	r      *bufio.Reader
	cancel context.CancelFunc
}

func (h *httpAPI) lease(t *testing.T, body string, hdr ...string) *leaseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/raftq.v1.Broker/Lease", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/connect+json")
	for _, kv := range hdr {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		cancel()
		t.Fatalf("Lease: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &leaseStream{body: resp.Body, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *leaseStream) close() { s.cancel(); s.body.Close() }

// next reads one envelope: its flags and message.
func (s *leaseStream) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	_, err := io.ReadFull(s.r, b)
	return hdr[0], b, err
}

// delivery reads the next LeaseResponse; an end-of-stream fails the test.
func (s *leaseStream) delivery(t *testing.T) *raftqv1.LeaseResponse {
	t.Helper()
	flags, b, err := s.next()
	if err != nil || flags != 0 {
		t.Fatalf("lease stream: flags %x %s %v", flags, b, err)
	}
	var resp raftqv1.LeaseResponse
	if err := protojson.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	return &resp
}

// end reads the end-of-stream message's error ("" code when OK).
func (s *leaseStream) end(t *testing.T) wireError {
	t.Helper()
	flags, b, err := s.next()
	if err != nil || flags != transport.EnvelopeEndStream {
		t.Fatalf("want the end of stream: flags %x %s %v", flags, b, err)
	}
	var end struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &end); err != nil {
		t.Fatal(err)
	}
	if len(end.Error) == 0 {
		return wireError{}
	}
	return decodeWireError(t, end.Error)
}

// TestConnectLeaseStream: a Lease held open over HTTP delivers, a second
// HTTP call acks while it is open, and the ack counts once; a standard
// Connect envelope and bare JSON both open it; a follower ends the stream
// with the gRPC redirect (NOT_LEADER and the leader's address) as the
// end-of-stream error.
func TestConnectLeaseStream(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2})
	l, f := c.Leader(), c.Followers()[0]
	lh, fh := serveHTTPPort(t, l, nil), serveHTTPPort(t, f, nil)
	lh.ok(t, "Broker/CreateQueue", `{"name":"jobs"}`, &raftqv1.CreateQueueResponse{})
	lh.ok(t, "Broker/Enqueue", `{"queue":"jobs","messages":[{"payload":"b25l"},{"payload":"dHdv"}]}`, &raftqv1.EnqueueResponse{})

	req := `{"queue":"jobs","max_in_flight":1}`
	var env [5]byte
	binary.BigEndian.PutUint32(env[1:], uint32(len(req)))
	for i, body := range []string{req, string(env[:]) + req} {
		s := lh.lease(t, body)
		resp := s.delivery(t)
		if len(resp.Messages) != 1 {
			t.Fatalf("want one delivery (max_in_flight 1), got %v", resp.Messages)
		}
		d := resp.Messages[0]
		var acked raftqv1.AckResponse
		fh.ok(t, "Broker/Ack", fmt.Sprintf(`{"queue":"jobs","acks":[{"message_id":%q,"lease_token":%q}]}`, d.Id, d.LeaseToken), &acked)
		if len(acked.Results) != 1 || !acked.Results[0].Ok {
			t.Fatalf("ack %d: %v", i, acked.Results)
		}
		s.close()
	}
	waitUntil(t, 10*time.Second, "both acked, nothing leased", func() error {
		var q raftqv1.GetQueueResponse
		lh.ok(t, "Broker/GetQueue", `{"name":"jobs"}`, &q)
		if st := q.Queue.Stats; st.AckedTotal != 2 || st.Ready != 0 || st.InFlight != 0 || st.Consumers != 0 {
			return fmt.Errorf("stats %v", st)
		}
		return nil
	})

	e := fh.lease(t, req).end(t)
	if e.Code != "unavailable" {
		t.Fatalf("lease on a follower ended with %+v", e)
	}
	if info := errorInfoOf(t, e); info.Reason != transport.ReasonNotLeader || info.Metadata["leader_id"] != l.ID || info.Metadata["leader_addr"] != l.Addrs.GRPC {
		t.Fatalf("redirect detail %v, want NOT_LEADER naming %s at %s", info, l.ID, l.Addrs.GRPC)
	}
	if e := lh.lease(t, `{"queue":"nope"}`).end(t); e.Code != "not_found" {
		t.Fatalf("lease of an unknown queue ended with %+v", e)
	}
}

// TestConnectAuth: the JSON API takes the credentials a gRPC call takes
// (a bearer header, a client certificate over TLS) with the same
// permissions and answers, and never the dashboard's session cookie.
func TestConnectAuth(t *testing.T) {
	p := testcluster.NewPKI(t)
	c := startInproc(t, inprocOpts{nodes: 2, expect: 2, tls: p, auth: auth.ModeToken, bootstrapToken: testBootstrap})
	waitAuthVersion(t, c)
	ctx := tctx(t, time.Minute)
	l, f := c.Leader(), c.Followers()[0]
	admin := bearer(ctx, testBootstrap)
	if _, err := l.Broker.CreateQueue(admin, &raftqv1.CreateQueueRequest{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	alice := mustToken(t, ctx, l, "alice", time.Hour)
	bob := mustToken(t, ctx, l, "bob", time.Hour)
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "alice", Pattern: "jobs", Allow: []string{"produce", "browse"}})
	mustGrant(t, ctx, l, &raftqv1.GrantRequest{Identity: "carol", Pattern: "jobs", Allow: []string{"produce"}})
	c.Synced()

	clientTLS := func(cert string) *tls.Config {
		certFile, keyFile := "", ""
		if cert != "" {
			fl := p.Issue(t, pki.Request{Name: cert})
			certFile, keyFile = fl.Cert, fl.Key
		}
		cfg, err := tlsconfig.ClientConfig(p.CAFile(), certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	anon := serveHTTPPort(t, f, clientTLS(""))
	carol := serveHTTPPort(t, f, clientTLS("carol"))
	enqueue := `{"queue":"jobs","messages":[{"payload":"eA=="}]}`
	for _, tc := range []struct {
		name     string
		h        *httpAPI
		method   string
		hdr      []string
		wantHTTP int
		wantCode string
	}{
		{"no credentials", anon, "Broker/Enqueue", nil, 401, "unauthenticated"},
		{"wrong token", anon, "Broker/Enqueue", []string{"Authorization: Bearer rqt_wrong"}, 401, "unauthenticated"},
		{"session cookie only", anon, "Broker/Enqueue", []string{"Cookie: " + auth.SessionCookie + "=" + alice}, 401, "unauthenticated"},
		{"token without the permission", anon, "Broker/Enqueue", []string{"Authorization: Bearer " + bob}, 403, "permission_denied"},
		{"token with produce", anon, "Broker/Enqueue", []string{"Authorization: Bearer " + alice}, 200, ""},
		{"token, lowercase scheme", anon, "Broker/Enqueue", []string{"Authorization: bearer " + alice}, 200, ""},
		{"certificate with produce", carol, "Broker/Enqueue", nil, 200, ""},
		{"certificate without purge", carol, "Broker/PurgeQueue", nil, 403, "permission_denied"},
		{"certificate forging node identity headers", carol, "Broker/PurgeQueue", []string{"Raftq-Identity: n1", "Raftq-Identity-Kind: node", "Raftq-Identity-Admin: true"}, 403, "permission_denied"},
		{"status needs admin for everything", anon, "Cluster/Status", []string{"Authorization: Bearer " + alice}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := enqueue
			if tc.method == "Broker/PurgeQueue" {
				body = `{"name":"jobs"}`
			} else if tc.method == "Cluster/Status" {
				body = `{}`
			}
			code, b := tc.h.call(t, tc.method, body, tc.hdr...)
			if code != tc.wantHTTP {
				t.Fatalf("%d %s, want %d", code, b, tc.wantHTTP)
			}
			if tc.wantCode != "" {
				if e := decodeWireError(t, b); e.Code != tc.wantCode {
					t.Fatalf("%s, want %s", b, tc.wantCode)
				}
			}
			if tc.method == "Cluster/Status" {
				var st raftqv1.StatusResponse
				if err := protojson.Unmarshal(b, &st); err != nil || st.LeaderId != l.ID || st.CommitIndex != 0 {
					t.Fatalf("a non-admin's status is trimmed as over gRPC: %s %v", b, err)
				}
			}
		})
	}
	// A Lease over HTTP is authorised as the gRPC stream: alice may not
	// consume.
	if e := anon.lease(t, `{"queue":"jobs"}`, "Authorization: Bearer "+alice).end(t); e.Code != "permission_denied" || !strings.Contains(e.Message, "consume") {
		t.Fatalf("alice's lease ended with %+v", e)
	}
	info, err := l.Broker.GetQueue(admin, &raftqv1.GetQueueRequest{Name: "jobs"})
	if err != nil || info.Queue.Stats.Ready != 3 {
		t.Fatalf("want exactly the 3 allowed enqueues: %v %v", info, err)
	}
}
