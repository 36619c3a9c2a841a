package client

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestMain fails the run if any goroutine of this package outlives the
// tests: consumers, keepers and fake handlers must all have returned.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		var leaked []string
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// The first trace is this goroutine's own.
		for _, g := range strings.Split(string(buf), "\n\n")[1:] {
			if strings.Contains(g, "raftq/raftq/client.") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		// Goroutines that are returning need a moment to be scheduled; there
		// is no event to wait on for another goroutine's exit.
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// call is one RPC a fake server received.
type call struct {
	server string
	method string
	req    proto.Message
}

// recorder collects calls across fake servers and lets a test wait for a
// condition on them, woken by each new call rather than by polling.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{})}
}

func (r *recorder) add(server, method string, req proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{server, method, req})
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) snapshot() ([]call, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...), r.changed
}

// until blocks until cond holds for the calls so far (true) or ctx ends.
func (r *recorder) until(ctx context.Context, cond func([]call) bool) bool {
	for {
		calls, changed := r.snapshot()
		if cond(calls) {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// wait blocks until cond holds for the calls so far, failing the test after
// 5 seconds.
func (r *recorder) wait(t *testing.T, what string, cond func([]call) bool) []call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !r.until(ctx, cond) {
		calls, _ := r.snapshot()
		t.Fatalf("timed out waiting for %s; calls: %v", what, describe(calls))
	}
	calls, _ := r.snapshot()
	return calls
}

func describe(calls []call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.server+":"+c.method)
	}
	return out
}

func count(calls []call, method string) int {
	n := 0
	for _, c := range calls {
		if c.method == method {
			n++
		}
	}
	return n
}

// fakeBroker is an in-process Broker and Cluster. Each hook, when set,
// decides the answer; unset hooks give a plausible success.
type fakeBroker struct {
	raftqv1.UnimplementedBrokerServer
	name string
	rec  *recorder

	enqueue func(*raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error)
	unary   func(method string) error // consulted first by every unary RPC
	lease   func(*raftqv1.LeaseRequest, grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error
	extend  func(*raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error)
	members func() []string // gRPC addresses Status lists

	// streams makes EnqueueStream serve (otherwise it is Unimplemented, as
	// on an older broker): each request goes through Enqueue above, then
	// breakAfter, if set, may end the stream without sending the answer.
	streams    bool
	breakAfter func(n int) bool
	breakOK    bool         // end the broken stream with OK, not UNAVAILABLE
	opened     atomic.Int32 // EnqueueStreams opened
}

func (f *fakeBroker) EnqueueStream(s grpc.BidiStreamingServer[raftqv1.EnqueueStreamRequest, raftqv1.EnqueueStreamResponse]) error {
	f.opened.Add(1)
	if !f.streams {
		return status.Error(codes.Unimplemented, "unknown method EnqueueStream")
	}
	for n := 1; ; n++ {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		resp := &raftqv1.EnqueueStreamResponse{Seq: req.Seq}
		r, err := f.Enqueue(s.Context(), req.Request)
		if err != nil {
			resp.Error = status.Convert(err).Proto()
		} else {
			resp.Response = r
		}
		if f.breakAfter != nil && f.breakAfter(n) {
			if f.breakOK {
				return nil
			}
			return status.Error(codes.Unavailable, "stream broken after the request was served")
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

func (f *fakeBroker) pre(method string, req proto.Message) error {
	f.rec.add(f.name, method, req)
	if f.unary != nil {
		return f.unary(method)
	}
	return nil
}

func (f *fakeBroker) Enqueue(_ context.Context, req *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
	if err := f.pre("Enqueue", req); err != nil {
		return nil, err
	}
	if f.enqueue != nil {
		return f.enqueue(req)
	}
	resp := &raftqv1.EnqueueResponse{}
	for i := range req.GetMessages() {
		resp.MessageIds = append(resp.MessageIds, fmt.Sprintf("%s-%d", f.name, i))
	}
	return resp, nil
}

func (f *fakeBroker) UpdateQueue(_ context.Context, req *raftqv1.UpdateQueueRequest) (*raftqv1.UpdateQueueResponse, error) {
	if err := f.pre("UpdateQueue", req); err != nil {
		return nil, err
	}
	return &raftqv1.UpdateQueueResponse{Queue: &raftqv1.QueueInfo{Name: req.GetName(), Config: req.GetConfig()}}, nil
}

func (f *fakeBroker) Ack(_ context.Context, req *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	if err := f.pre("Ack", req); err != nil {
		return nil, err
	}
	return &raftqv1.AckResponse{Results: okResults(len(req.GetAcks()))}, nil
}

func (f *fakeBroker) Nack(_ context.Context, req *raftqv1.NackRequest) (*raftqv1.NackResponse, error) {
	if err := f.pre("Nack", req); err != nil {
		return nil, err
	}
	return &raftqv1.NackResponse{Results: okResults(len(req.GetNacks()))}, nil
}

func (f *fakeBroker) ExtendLease(_ context.Context, req *raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error) {
	if err := f.pre("ExtendLease", req); err != nil {
		return nil, err
	}
	if f.extend != nil {
		return f.extend(req)
	}
	resp := &raftqv1.ExtendLeaseResponse{Results: okResults(len(req.GetLeases()))}
	for range req.GetLeases() {
		resp.DeadlinesMs = append(resp.DeadlinesMs, time.Now().UnixMilli()+req.GetExtendByMs())
	}
	return resp, nil
}

func (f *fakeBroker) Lease(req *raftqv1.LeaseRequest, s grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
	f.rec.add(f.name, "Lease", req)
	if f.lease != nil {
		return f.lease(req, s)
	}
	<-s.Context().Done()
	return nil
}

type fakeCluster struct {
	raftqv1.UnimplementedClusterServer
	b *fakeBroker
}

func (f *fakeCluster) Status(_ context.Context, req *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	if err := f.b.pre("Status", req); err != nil {
		return nil, err
	}
	resp := &raftqv1.StatusResponse{LeaderId: f.b.name}
	if f.b.members != nil {
		for _, addr := range f.b.members() {
			resp.Nodes = append(resp.Nodes, &raftqv1.Node{GrpcAddr: addr})
		}
	}
	return resp, nil
}

func okResults(n int) []*raftqv1.ItemResult {
	out := make([]*raftqv1.ItemResult, n)
	for i := range out {
		out[i] = &raftqv1.ItemResult{Ok: true}
	}
	return out
}

// serve starts f on a loopback port until the test ends.
func serve(t *testing.T, f *fakeBroker) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	raftqv1.RegisterBrokerServer(srv, f)
	raftqv1.RegisterClusterServer(srv, &fakeCluster{b: f})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// hungAddr is a loopback address that accepts connections and never
// answers, like a paused process.
func hungAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// fastRetry keeps retry tests quick.
func fastRetry() RetryPolicy {
	return RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
}

func dial(t *testing.T, seeds ...string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), seeds, WithRetryPolicy(fastRetry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func notLeader(leaderAddr string) error {
	st, err := status.New(codes.Unavailable, "not the leader").WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonNotLeader,
		Domain:   "raftq.io",
		Metadata: map[string]string{"leader_id": "other", "leader_addr": leaderAddr},
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func noLeader() error {
	st, err := status.New(codes.Unavailable, "no leader").WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonNoLeader, Domain: "raftq.io",
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
