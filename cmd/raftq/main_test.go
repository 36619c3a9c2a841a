package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestMain fails the run if a goroutine started by this package's code
// outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var leaked []string
			for _, g := range strings.Split(string(buf), "\n\n")[1:] { // [0] is this goroutine
				if strings.Contains(g, "/cmd/raftq/") {
					leaked = append(leaked, g)
				}
			}
			if len(leaked) == 0 {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", strings.Join(leaked, "\n\n"))
				code = 1
				break
			}
			// No event marks another goroutine's exit; look again shortly.
			time.Sleep(10 * time.Millisecond)
		}
	}
	os.Exit(code)
}

// fake is an in-process broker that records requests and answers from
// canned data.
type fake struct {
	raftqv1.UnimplementedBrokerServer
	raftqv1.UnimplementedClusterServer
	raftqv1.UnimplementedAuthServer

	mu   sync.Mutex
	reqs []proto.Message
	// authz is the authorization metadata of every call, in order.
	authz []string
	// consistency is every call's method and raftq-read-consistency
	// metadata ("/raftq.v1.Broker/Peek=stale"), in order.
	consistency []string

	deliveries []*raftqv1.Delivery     // pushed on Lease, up to max_in_flight
	consumers  []*raftqv1.ConsumerInfo // ListConsumers of "q"
	status     *raftqv1.StatusResponse
	verify     *raftqv1.VerifyResponse
	// refuseAcks makes Ack refuse every item, as the broker does once
	// a lease ran out.
	refuseAcks bool
	// loseDeletes is how many DeleteQueue calls (the first ones) are
	// answered UNAVAILABLE after they are recorded: lost answers.
	loseDeletes int
	// statuses, when set, are Status's answers in turn (the last repeats).
	statuses []*raftqv1.StatusResponse
	// message is GetMessage's answer (message_test.go).
	message *raftqv1.GetMessageResponse
}

// moved is what Redrive and PurgeQueue report for each queue name.
var moved = map[string]int64{"q": 7, "orders": 1, "one": 1}

func (f *fake) record(m proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, m)
}

// requests returns the recorded requests of type T.
func requests[T proto.Message](f *fake) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []T
	for _, r := range f.reqs {
		if t, ok := r.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func queueInfo(name string, cfg *raftqv1.QueueConfig) *raftqv1.QueueInfo {
	return &raftqv1.QueueInfo{Name: name, Config: cfg, Stats: &raftqv1.QueueStats{Ready: 3}}
}

func (f *fake) CreateQueue(_ context.Context, r *raftqv1.CreateQueueRequest) (*raftqv1.CreateQueueResponse, error) {
	f.record(r)
	return &raftqv1.CreateQueueResponse{Queue: queueInfo(r.GetName(), r.GetConfig())}, nil
}

func (f *fake) UpdateQueue(_ context.Context, r *raftqv1.UpdateQueueRequest) (*raftqv1.UpdateQueueResponse, error) {
	f.record(r)
	return &raftqv1.UpdateQueueResponse{Queue: queueInfo(r.GetName(), r.GetConfig())}, nil
}

func (f *fake) GetQueue(_ context.Context, r *raftqv1.GetQueueRequest) (*raftqv1.GetQueueResponse, error) {
	f.record(r)
	if r.GetName() == "orders.dlq" {
		return &raftqv1.GetQueueResponse{Queue: f.queues()[1]}, nil
	}
	if r.GetName() != "q" {
		return nil, status.Errorf(codes.NotFound, "queue %q not found", r.GetName())
	}
	q := queueInfo("q", &raftqv1.QueueConfig{VisibilityTimeoutMs: 30000,
		Throttles: map[string]*raftqv1.ThrottleRule{"api": {RatePerSec: 5, Burst: 2}}, ConcurrencyLimit: 3, ConcurrencyLimits: map[string]int32{"tenant-a": 1, "bulk": 0}})
	q.Drain = &raftqv1.DrainEstimate{State: "draining", DepthChangePerSec: -5, DeliveriesPerSec: 5.5, EmptiesInSec: 30.2}
	if r.GetIncludeKeys() {
		q.FairnessKeys = []*raftqv1.FairnessKeyStats{{Key: "tenant-a", Pending: 4, Weight: 2}}
		q.ThrottleKeys = []*raftqv1.ThrottleKeyStats{{Key: "api", Tokens: 1.5, RatePerSec: 5, Burst: 2}}
	}
	return &raftqv1.GetQueueResponse{Queue: q}, nil
}

func (f *fake) ListQueues(_ context.Context, r *raftqv1.ListQueuesRequest) (*raftqv1.ListQueuesResponse, error) {
	f.record(r)
	return &raftqv1.ListQueuesResponse{Queues: f.queues()}, nil
}

// queues is what the fake holds: orders, which dead-letters into
// orders.dlq.
func (f *fake) queues() []*raftqv1.QueueInfo {
	dlq := queueInfo("orders.dlq", nil)
	dlq.IsDeadLetterQueue = true
	return []*raftqv1.QueueInfo{queueInfo("orders", &raftqv1.QueueConfig{DeadLetterQueue: "orders.dlq"}), dlq}
}

func (f *fake) Enqueue(_ context.Context, r *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
	f.record(r)
	resp := &raftqv1.EnqueueResponse{}
	for _, m := range r.GetMessages() {
		resp.MessageIds = append(resp.MessageIds, "id-"+string(m.GetPayload()))
	}
	return resp, nil
}

func (f *fake) ListConsumers(_ context.Context, r *raftqv1.ListConsumersRequest) (*raftqv1.ListConsumersResponse, error) {
	f.record(r)
	if r.GetQueue() != "q" {
		return nil, status.Errorf(codes.NotFound, "queue %q not found", r.GetQueue())
	}
	return &raftqv1.ListConsumersResponse{Consumers: f.consumers}, nil
}

func (f *fake) Peek(_ context.Context, r *raftqv1.PeekRequest) (*raftqv1.PeekResponse, error) {
	f.record(r)
	return &raftqv1.PeekResponse{Messages: f.deliveries}, nil
}

func (f *fake) Redrive(_ context.Context, r *raftqv1.RedriveRequest) (*raftqv1.RedriveResponse, error) {
	f.record(r)
	return &raftqv1.RedriveResponse{Moved: moved[r.GetQueue()]}, nil
}

func (f *fake) Lease(r *raftqv1.LeaseRequest, s grpc.ServerStreamingServer[raftqv1.LeaseResponse]) error {
	f.record(r)
	n := min(int(r.GetMaxInFlight()), len(f.deliveries))
	if n > 0 {
		if err := s.Send(&raftqv1.LeaseResponse{Messages: f.deliveries[:n]}); err != nil {
			return err
		}
	}
	<-s.Context().Done()
	return nil
}

func (f *fake) Ack(_ context.Context, r *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	f.record(r)
	if f.refuseAcks {
		res := make([]*raftqv1.ItemResult, len(r.GetAcks()))
		for i := range res {
			res[i] = &raftqv1.ItemResult{Code: int32(codes.FailedPrecondition), Error: "lease expired"}
		}
		return &raftqv1.AckResponse{Results: res}, nil
	}
	return &raftqv1.AckResponse{Results: okResults(len(r.GetAcks()))}, nil
}

func (f *fake) Nack(_ context.Context, r *raftqv1.NackRequest) (*raftqv1.NackResponse, error) {
	f.record(r)
	return &raftqv1.NackResponse{Results: okResults(len(r.GetNacks()))}, nil
}

func okResults(n int) []*raftqv1.ItemResult {
	out := make([]*raftqv1.ItemResult, n)
	for i := range out {
		out[i] = &raftqv1.ItemResult{Ok: true}
	}
	return out
}

func (f *fake) Status(_ context.Context, r *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	f.record(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.statuses) > 0 {
		st := f.statuses[0]
		if len(f.statuses) > 1 {
			f.statuses = f.statuses[1:]
		}
		return st, nil
	}
	if f.status == nil {
		return nil, status.Error(codes.Unimplemented, "the fake has no status")
	}
	return f.status, nil
}

func (f *fake) Verify(_ context.Context, r *raftqv1.VerifyRequest) (*raftqv1.VerifyResponse, error) {
	f.record(r)
	return f.verify, nil
}

func (f *fake) RemoveNode(_ context.Context, r *raftqv1.RemoveNodeRequest) (*raftqv1.RemoveNodeResponse, error) {
	f.record(r)
	return &raftqv1.RemoveNodeResponse{}, nil
}

func (f *fake) SetClusterSettings(_ context.Context, r *raftqv1.SetClusterSettingsRequest) (*raftqv1.SetClusterSettingsResponse, error) {
	f.record(r)
	return &raftqv1.SetClusterSettingsResponse{Settings: &raftqv1.ClusterSettings{MaxQueuedBytes: r.GetMaxQueuedBytes(), MaxQueues: r.GetMaxQueues(),
		Groups: r.GetGroups(), Replicas: r.GetReplicas()}}, nil
}

// serve runs f on a loopback port until the test ends.
func serve(t *testing.T, f *fake) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		f.mu.Lock()
		f.authz = append(f.authz, strings.Join(md.Get("authorization"), ";"))
		f.consistency = append(f.consistency, info.FullMethod+"="+strings.Join(md.Get("raftq-read-consistency"), ";"))
		f.mu.Unlock()
		return h(ctx, req)
	}))
	raftqv1.RegisterBrokerServer(srv, f)
	raftqv1.RegisterClusterServer(srv, f)
	raftqv1.RegisterAuthServer(srv, f)
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

type result struct {
	code           int
	stdout, stderr string
}

// raftq runs the command line against the fake at addr.
func raftq(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	full := append([]string{"--addr", addr, "--rpc-timeout", "3s"}, args...)
	code := run(ctx, full, strings.NewReader(stdin), &out, &errOut, func(string) string { return "" })
	return result{code, out.String(), errOut.String()}
}

func TestErrorsPrintCodeAndExitNonZero(t *testing.T) {
	addr := serve(t, &fake{})
	r := raftq(t, addr, "", "queue", "get", "nope")
	if r.code != 1 {
		t.Fatalf("exit code %d, want 1", r.code)
	}
	if want := "raftq: NotFound: queue \"nope\" not found\n"; r.stderr != want {
		t.Fatalf("stderr = %q, want %q", r.stderr, want)
	}
}

func TestAddrFromEnvironment(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "RAFTQ_ADDR" {
			return "," + addr // a seed list with an empty entry
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := run(ctx, []string{"queue", "list"}, strings.NewReader(""), &out, &errOut, getenv); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if len(requests[*raftqv1.ListQueuesRequest](f)) != 1 {
		t.Fatal("RAFTQ_ADDR not used")
	}
}

func TestUnknownCommandFails(t *testing.T) {
	r := raftq(t, "127.0.0.1:1", "", "queue", "frobnicate", "x")
	if r.code == 0 {
		t.Fatal("exit code 0")
	}
}

// With nothing listening the command fails at once, naming every address
// tried, rather than after --rpc-timeout.
func TestNoBrokerFailsFastNamingAddresses(t *testing.T) {
	var dead []string
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, lis.Addr().String())
		lis.Close()
	}
	for _, args := range [][]string{
		{"queue", "list"},
		{"enqueue", "jobs", "x"},
		{"consume", "jobs", "--count", "1"},
	} {
		t.Run(args[0], func(t *testing.T) {
			var out, errOut bytes.Buffer
			// --rpc-timeout far beyond the test's own deadline: only
			// failing fast can pass.
			full := append([]string{"--addr", strings.Join(dead, ","), "--rpc-timeout", "1h"}, args...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code := run(ctx, full, strings.NewReader(""), &out, &errOut, func(string) string { return "" })
			if code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			msg := errOut.String()
			for _, want := range append([]string{"no node reachable", "connection refused", "raftq serve"}, dead...) {
				if !strings.Contains(msg, want) {
					t.Errorf("stderr %q does not contain %q", msg, want)
				}
			}
		})
	}
}

func (f *fake) DeleteQueue(_ context.Context, r *raftqv1.DeleteQueueRequest) (*raftqv1.DeleteQueueResponse, error) {
	f.record(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loseDeletes > 0 {
		f.loseDeletes--
		return nil, status.Error(codes.Unavailable, "test: the answer was lost")
	}
	return &raftqv1.DeleteQueueResponse{}, nil
}

func (f *fake) PurgeQueue(_ context.Context, r *raftqv1.PurgeQueueRequest) (*raftqv1.PurgeQueueResponse, error) {
	f.record(r)
	if n, ok := moved[r.GetName()]; ok && r.GetName() != "q" {
		return &raftqv1.PurgeQueueResponse{Purged: n}, nil
	}
	return &raftqv1.PurgeQueueResponse{Purged: 3}, nil
}
