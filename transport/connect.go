package transport

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The API as JSON over HTTP, in the Connect protocol (connectrpc.com):
// POST /raftq.v1.Broker/<Method> with Content-Type application/json and
// the request as the body answers the response as JSON (unary form); the
// Lease stream is a Connect server stream (application/connect+json,
// enveloped messages, an end-of-stream message carrying the error).
//
// Each call goes through the very code a gRPC call does: the generated
// method handler, called with the server's own interceptor (metrics, auth,
// routing and forwarding), in a context that carries the request's headers
// as incoming metadata and its connection (address, TLS state with the
// client certificate) as the gRPC peer. So codes, details, permissions and
// credentials are the gRPC ones by construction; DESIGN.md says why this
// and not vanguard or connect-go.

// ConnectPrefix starts every path the JSON API serves on the HTTP port.
const ConnectPrefix = "/raftq.v1."

// connectMethod is one RPC reachable over HTTP: a unary handler or a
// server-stream handler of the generated service descriptor.
type connectMethod struct {
	srv    any
	unary  grpc.MethodHandler
	stream grpc.StreamHandler
}

// connectRoutes lists the RPCs served over HTTP: every Broker RPC but
// EnqueueStream (client streaming has no HTTP/1.1 form), and the
// Cluster's read-only Status and Verify.
func (s *Server) connectRoutes() map[string]connectMethod {
	m := map[string]connectMethod{}
	add := func(desc *grpc.ServiceDesc, srv any, only map[string]bool) {
		for _, md := range desc.Methods {
			if only == nil || only[md.MethodName] {
				m["/"+desc.ServiceName+"/"+md.MethodName] = connectMethod{srv: srv, unary: md.Handler}
			}
		}
		for _, sd := range desc.Streams {
			if sd.ServerStreams && !sd.ClientStreams && (only == nil || only[sd.StreamName]) {
				m["/"+desc.ServiceName+"/"+sd.StreamName] = connectMethod{srv: srv, stream: sd.Handler}
			}
		}
	}
	add(&raftqv1.Broker_ServiceDesc, brokerService{Server: s}, nil)
	add(&raftqv1.Cluster_ServiceDesc, &clusterService{s: s}, map[string]bool{"Status": true, "Verify": true})
	return m
}

// connectHandler serves ConnectPrefix paths. It never looks at the
// dashboard's session cookie: credentials are what a gRPC call carries
// (a bearer header, a client certificate), checked by the same code.
func (s *Server) connectHandler() http.Handler {
	routes := s.connectRoutes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, ok := routes[r.URL.Path]
		if !ok {
			writeConnectError(w, status.Errorf(codes.Unimplemented, "%s is not served over HTTP (JSON serves every Broker RPC but EnqueueStream, and Cluster Status and Verify)", r.URL.Path), nil)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeConnectErrorStatus(w, http.StatusMethodNotAllowed, status.Errorf(codes.Unimplemented, "%s: use POST", r.URL.Path), nil)
			return
		}
		ctx, cancel, err := s.connectContext(r)
		if err != nil {
			writeConnectError(w, err, nil)
			return
		}
		defer cancel()
		if m.unary != nil {
			s.serveConnectUnary(ctx, w, r, r.URL.Path, m)
			return
		}
		s.serveConnectStream(ctx, w, r, r.URL.Path, m)
	})
}

// protoJSON is the JSON of the API: the .proto field names and zero
// values present, as everything raftq prints (docs/api.md, JSON).
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// connectContext is the request's context as a gRPC handler expects it:
// the headers as incoming metadata, the connection as the peer, and the
// Connect-Timeout-Ms header as the deadline.
func (s *Server) connectContext(r *http.Request) (context.Context, context.CancelFunc, error) {
	md := metadata.MD{}
	for k, vs := range r.Header {
		k = strings.ToLower(k)
		if !passHeader(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				b, err := decodeBinaryHeader(v)
				if err != nil {
					return nil, nil, status.Errorf(codes.InvalidArgument, "header %s: not base64: %v", k, err)
				}
				v = string(b)
			}
			md[k] = append(md[k], v)
		}
	}
	ctx := metadata.NewIncomingContext(r.Context(), md)
	p := &peer.Peer{Addr: httpPeerAddr(r.RemoteAddr)}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *r.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	ctx = peer.NewContext(ctx, p)
	if t := r.Header.Get("Connect-Timeout-Ms"); t != "" {
		ms, err := strconv.ParseInt(t, 10, 64)
		if err != nil || ms <= 0 || len(t) > 10 {
			return nil, nil, status.Errorf(codes.InvalidArgument, "Connect-Timeout-Ms %q: want a positive integer of at most 10 digits", t)
		}
		ctx, cancel := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	return ctx, cancel, nil
}

// passHeader reports whether a request header travels to the handlers
// as metadata: everything but the HTTP and Connect protocol's own
// headers, grpc's reserved ones, and the cookie (the dashboard's
// session never authenticates an API call).
func passHeader(k string) bool {
	switch k {
	case "cookie", "content-type", "content-length", "content-encoding", "accept", "accept-encoding",
		"connection", "host", "te", "trailer", "transfer-encoding", "upgrade", "keep-alive", "expect":
		return false
	}
	return !strings.HasPrefix(k, "connect-") && !strings.HasPrefix(k, "grpc-") && !strings.HasPrefix(k, "proxy-")
}

func decodeBinaryHeader(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// httpPeerAddr is a request's remote address as a net.Addr.
func httpPeerAddr(remote string) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", remote); err == nil {
		return a
	}
	return stringAddr(remote)
}

type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

// readBody reads a request body of at most MaxRequestBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, status.Errorf(codes.ResourceExhausted, "request body larger than max (%d bytes)", MaxRequestBytes)
	}
	if err != nil {
		return nil, status.Errorf(codes.Canceled, "reading the request body: %v", err)
	}
	return b, nil
}

// unmarshalJSON reads a request message; an empty body is the empty
// message. Unknown fields are refused, naming them: a misspelt field
// would otherwise be dropped without a word.
func unmarshalJSON(b []byte, m proto.Message) error {
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return status.Errorf(codes.InvalidArgument, "request body is not a JSON %s: %v", m.ProtoReflect().Descriptor().Name(), err)
	}
	return nil
}

// jsonContentType reports whether the request's Content-Type is want
// (parameters such as charset ignored).
func jsonContentType(r *http.Request, want string) bool {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), want)
}

func (s *Server) serveConnectUnary(ctx context.Context, w http.ResponseWriter, r *http.Request, method string, m connectMethod) {
	if !jsonContentType(r, "application/json") {
		writeConnectErrorStatus(w, http.StatusUnsupportedMediaType, status.Errorf(codes.Unimplemented,
			"%s: Content-Type %q; this method takes application/json", method, r.Header.Get("Content-Type")), nil)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeConnectError(w, err, nil)
		return
	}
	dec := func(v any) error { return unmarshalJSON(body, v.(proto.Message)) }
	// The generated handler decodes, then calls the interceptor with the
	// method's full name: exactly the path of a gRPC call.
	resp, err := m.unary(m.srv, ctx, dec, s.unary)
	if err != nil {
		writeConnectError(w, err, s.leaderHTTPAddr)
		return
	}
	out, err := protoJSON.Marshal(resp.(proto.Message))
	if err != nil {
		writeConnectError(w, status.Errorf(codes.Internal, "encoding the response: %v", err), nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// Connect envelope flags (https://connectrpc.com/docs/protocol, streaming).
const (
	envelopeCompressed = 0x01
	envelopeEndStream  = 0x02
)

func (s *Server) serveConnectStream(ctx context.Context, w http.ResponseWriter, r *http.Request, method string, m connectMethod) {
	if !jsonContentType(r, "application/connect+json") {
		writeConnectErrorStatus(w, http.StatusUnsupportedMediaType, status.Errorf(codes.Unimplemented,
			"%s is a server stream: Content-Type %q; it takes application/connect+json", method, r.Header.Get("Content-Type")), nil)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeConnectError(w, err, nil)
		return
	}
	req, err := unenvelope(body)
	if err != nil {
		writeConnectError(w, err, nil)
		return
	}
	// A stopping node ends its HTTP streams as it ends gRPC ones (with
	// UNAVAILABLE), or the HTTP server's shutdown would wait for them.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.stopping:
			cancel(status.Error(codes.Unavailable, "node stopping"))
		case <-ctx.Done():
		}
	}()
	flusher, _ := w.(http.Flusher)
	ss := &connectStream{ctx: ctx, w: w, flush: flusher, req: req}
	info := &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}
	err = s.metrics.stream(m.srv, ss, info, func(srv any, st grpc.ServerStream) error {
		return s.cfg.Auth.StreamInterceptor(srv, st, info, m.stream)
	})
	ss.start()
	end := map[string]any{}
	if err != nil {
		end["error"] = connectErrorJSON(err, s.leaderHTTPAddr)
	}
	b, _ := json.Marshal(end)
	_ = ss.writeEnvelope(envelopeEndStream, b)
}

// unenvelope takes the one request of a server stream from its body: a
// Connect envelope (flags, big-endian length, message). A body that is
// bare JSON (starts with '{') is taken as the message too, so a curl
// line needs no framing; no envelope can start with '{' (flags 0x7b).
func unenvelope(b []byte) ([]byte, error) {
	if len(b) > 0 && b[0] == '{' {
		return b, nil
	}
	if len(b) < 5 {
		return nil, status.Error(codes.InvalidArgument, "request body: want one Connect envelope (1 flag byte, 4 length bytes, the JSON message) or bare JSON")
	}
	if b[0]&envelopeCompressed != 0 {
		return nil, status.Error(codes.Unimplemented, "request envelope is compressed; compression is not supported")
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) != uint64(len(b)-5) {
		return nil, status.Errorf(codes.InvalidArgument, "request envelope says %d bytes, the body holds %d after it (send exactly one message)", n, len(b)-5)
	}
	return b[5:], nil
}

// connectStream is a grpc.ServerStream over one HTTP response: the
// generated stream handler receives the one request and sends each
// message as an envelope, flushed at once.
type connectStream struct {
	ctx     context.Context
	w       http.ResponseWriter
	flush   http.Flusher
	req     []byte
	recvd   bool
	started bool
}

func (c *connectStream) Context() context.Context     { return c.ctx }
func (c *connectStream) SetHeader(metadata.MD) error  { return nil }
func (c *connectStream) SendHeader(metadata.MD) error { c.start(); return nil }
func (c *connectStream) SetTrailer(metadata.MD)       {}

func (c *connectStream) start() {
	if c.started {
		return
	}
	c.started = true
	c.w.Header().Set("Content-Type", "application/connect+json")
	c.w.WriteHeader(http.StatusOK)
}

func (c *connectStream) SendMsg(m any) error {
	b, err := protoJSON.Marshal(m.(proto.Message))
	if err != nil {
		return status.Errorf(codes.Internal, "encoding a response: %v", err)
	}
	c.start()
	return c.writeEnvelope(0, b)
}

func (c *connectStream) writeEnvelope(flags byte, b []byte) error {
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := c.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := c.w.Write(b); err != nil {
		return err
	}
	if c.flush != nil {
		c.flush.Flush()
	}
	return nil
}

func (c *connectStream) RecvMsg(m any) error {
	if c.recvd {
		return io.EOF
	}
	c.recvd = true
	return unmarshalJSON(c.req, m.(proto.Message))
}

// connectCodes are the Connect protocol's names of the gRPC codes.
var connectCodes = map[codes.Code]string{
	codes.Canceled: "canceled", codes.Unknown: "unknown", codes.InvalidArgument: "invalid_argument",
	codes.DeadlineExceeded: "deadline_exceeded", codes.NotFound: "not_found", codes.AlreadyExists: "already_exists",
	codes.PermissionDenied: "permission_denied", codes.ResourceExhausted: "resource_exhausted",
	codes.FailedPrecondition: "failed_precondition", codes.Aborted: "aborted", codes.OutOfRange: "out_of_range",
	codes.Unimplemented: "unimplemented", codes.Internal: "internal", codes.Unavailable: "unavailable",
	codes.DataLoss: "data_loss", codes.Unauthenticated: "unauthenticated",
}

// connectHTTPStatus is the HTTP status of a unary error, as the Connect
// protocol maps each code.
func connectHTTPStatus(c codes.Code) int {
	switch c {
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// connectError is a Connect error as JSON: the gRPC status's code (by
// its Connect name), message and details (each its type name, the
// detail's protobuf bytes in base64, and its JSON as "debug" for a
// reader with no protobuf at hand).
type connectError struct {
	Code    string          `json:"code"`
	Message string          `json:"message,omitempty"`
	Details []connectDetail `json:"details,omitempty"`
}

type connectDetail struct {
	Type  string          `json:"type"`
	Value string          `json:"value"`
	Debug json.RawMessage `json:"debug,omitempty"`
}

// connectErrorJSON converts err (a gRPC status, or made one as a gRPC
// call would) to a Connect error. leaderHTTP, when given, adds the
// leader's HTTP address to a NOT_LEADER redirect, for an HTTP client.
func connectErrorJSON(err error, leaderHTTP func(id string) string) connectError {
	st := status.Convert(toStatus(err))
	ce := connectError{Code: connectCodes[st.Code()], Message: st.Message()}
	if ce.Code == "" {
		ce.Code = "unknown"
	}
	for _, d := range st.Proto().GetDetails() {
		if leaderHTTP != nil {
			d = withLeaderHTTP(d, leaderHTTP)
		}
		cd := connectDetail{Type: strings.TrimPrefix(d.GetTypeUrl(), "type.googleapis.com/"), Value: base64.RawStdEncoding.EncodeToString(d.GetValue())}
		if m, err := d.UnmarshalNew(); err == nil {
			if b, err := protoJSON.Marshal(m); err == nil {
				cd.Debug = b
			}
		}
		ce.Details = append(ce.Details, cd)
	}
	return ce
}

// withLeaderHTTP adds leader_http_addr to a NOT_LEADER ErrorInfo: over
// HTTP the client wants the leader's HTTP port, not its gRPC address.
func withLeaderHTTP(d *anypb.Any, leaderHTTP func(id string) string) *anypb.Any {
	var info errdetails.ErrorInfo
	if d.UnmarshalTo(&info) != nil || info.GetReason() != ReasonNotLeader {
		return d
	}
	addr := leaderHTTP(info.GetMetadata()["leader_id"])
	if addr == "" {
		return d
	}
	info.Metadata["leader_http_addr"] = addr
	out, err := anypb.New(&info)
	if err != nil {
		return d
	}
	return out
}

// leaderHTTPAddr is the HTTP address node id advertises, if known.
func (s *Server) leaderHTTPAddr(id string) string {
	for _, n := range s.legacy.node.Status().Nodes {
		if n.ID == id {
			return n.HTTPAddr
		}
	}
	return ""
}

func writeConnectError(w http.ResponseWriter, err error, leaderHTTP func(string) string) {
	writeConnectErrorStatus(w, connectHTTPStatus(status.Code(toStatus(err))), err, leaderHTTP)
}

func writeConnectErrorStatus(w http.ResponseWriter, code int, err error, leaderHTTP func(string) string) {
	b, mErr := json.Marshal(connectErrorJSON(err, leaderHTTP))
	if mErr != nil {
		b = []byte(fmt.Sprintf(`{"code":"internal","message":%q}`, mErr.Error()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
