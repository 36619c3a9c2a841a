package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func TestDialValidatesSeeds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seeds []string
	}{
		{"none", nil},
		{"only empty", []string{""}},
		{"no port", []string{"localhost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := Dial(context.Background(), tc.seeds); err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
		})
	}
}

func TestUnaryFollowsNotLeaderRedirect(t *testing.T) {
	forEachEnqueuePath(t, func(t *testing.T, streams bool) {
		rec := newRecorder()
		leader := serve(t, &fakeBroker{streams: streams, name: "B", rec: rec})
		follower := serve(t, &fakeBroker{streams: streams, name: "A", rec: rec, unary: func(string) error { return notLeader(leader) }})
		c := dial(t, follower)

		for range 2 {
			ids, err := c.EnqueuePayloads(context.Background(), "q", []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != 1 || ids[0] != "B-0" {
				t.Fatalf("ids = %v, want [B-0]", ids)
			}
		}
		calls, _ := rec.snapshot()
		// The second call goes straight to the leader it learned of.
		if got := strings.Join(describe(calls), " "); got != "A:Enqueue B:Enqueue B:Enqueue" {
			t.Fatalf("calls = %s", got)
		}
	})
}

func TestRetriesUnavailableThenSucceeds(t *testing.T) {
	forEachEnqueuePath(t, func(t *testing.T, streams bool) {
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"plain unavailable", status.Error(codes.Unavailable, "down")},
			{"no leader", noLeader()},
			{"not leader, leader unknown", notLeader("")},
			{"attempt timeout", status.Error(codes.DeadlineExceeded, "slow")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var attempts atomic.Int32
				addr := serve(t, &fakeBroker{streams: streams, name: "A", rec: newRecorder(), unary: func(string) error {
					if attempts.Add(1) <= 2 {
						return tc.err
					}
					return nil
				}})
				c := dial(t, addr)
				if _, err := c.EnqueuePayloads(context.Background(), "q", []byte("x")); err != nil {
					t.Fatal(err)
				}
				if got := attempts.Load(); got != 3 {
					t.Fatalf("attempts = %d, want 3", got)
				}
			})
		}
	})
}

func TestNoRetryOnFinalCodes(t *testing.T) {
	forEachEnqueuePath(t, func(t *testing.T, streams bool) {
		for _, code := range []codes.Code{
			codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
			codes.FailedPrecondition, codes.ResourceExhausted, codes.Unimplemented,
		} {
			t.Run(code.String(), func(t *testing.T) {
				var attempts atomic.Int32
				addr := serve(t, &fakeBroker{streams: streams, name: "A", rec: newRecorder(), unary: func(string) error {
					attempts.Add(1)
					return status.Error(code, "nope")
				}})
				c := dial(t, addr)
				_, err := c.EnqueuePayloads(context.Background(), "q", []byte("x"))
				if got := status.Code(err); got != code {
					t.Fatalf("code = %v, want %v (err %v)", got, code, err)
				}
				var se interface{ GRPCStatus() *status.Status }
				if !errors.As(err, &se) || se.GRPCStatus().Message() != "nope" {
					t.Fatalf("status not reachable with errors.As: %v", err)
				}
				if got := attempts.Load(); got != 1 {
					t.Fatalf("attempts = %d, want 1", got)
				}
			})
		}
	})
}

func TestRetryLimits(t *testing.T) {
	for _, tc := range []struct {
		name         string
		policy       RetryPolicy
		timeout      time.Duration
		wantAttempts int32 // 0: any
		wantDeadline bool
	}{
		{"max attempts", RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}, 0, 3, false},
		{"no deadline uses default", RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, 0, DefaultMaxAttempts, false},
		{"caller deadline", RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, 200 * time.Millisecond, 0, true},
		{"single attempt", RetryPolicy{MaxAttempts: 1}, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int32
			addr := serve(t, &fakeBroker{name: "A", rec: newRecorder(), unary: func(string) error {
				attempts.Add(1)
				return status.Error(codes.Unavailable, "down")
			}})
			c := dial(t, addr).WithRetryPolicy(tc.policy)
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			start := time.Now()
			_, err := c.EnqueuePayloads(ctx, "q", []byte("x"))
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("err = %v, want the last Unavailable", err)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != tc.wantDeadline {
				t.Fatalf("errors.Is(err, DeadlineExceeded) = %v, want %v (err %v)", got, tc.wantDeadline, err)
			}
			if tc.wantAttempts > 0 && attempts.Load() != tc.wantAttempts {
				t.Fatalf("attempts = %d, want %d", attempts.Load(), tc.wantAttempts)
			}
			if elapsed := time.Since(start); elapsed > 3*time.Second {
				t.Fatalf("took %v", elapsed)
			}
		})
	}
}

func TestRotatesOverSeeds(t *testing.T) {
	rec := newRecorder()
	live := serve(t, &fakeBroker{name: "live", rec: rec})
	c := dial(t, deadAddr(t), live)
	ids, err := c.EnqueuePayloads(context.Background(), "q", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != "live-0" {
		t.Fatalf("ids = %v", ids)
	}
}

func TestEnqueueDedupIDsStableAcrossRetries(t *testing.T) {
	forEachEnqueuePath(t, func(t *testing.T, streams bool) {
		var mu sync.Mutex
		var seen [][]string
		addr := serve(t, &fakeBroker{streams: streams, name: "A", rec: newRecorder(), enqueue: func(req *raftqv1.EnqueueRequest) (*raftqv1.EnqueueResponse, error) {
			var ids []string
			for _, m := range req.GetMessages() {
				ids = append(ids, m.GetDedupId())
			}
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, ids)
			if len(seen) == 1 {
				// The broker committed the batch but the answer is lost.
				return nil, status.Error(codes.Unavailable, "leadership lost")
			}
			return &raftqv1.EnqueueResponse{MessageIds: []string{"1", "2", "3"}}, nil
		}})
		c := dial(t, addr)
		msgs := []*raftqv1.EnqueueMessage{
			{Payload: []byte("a")},
			{Payload: []byte("b"), DedupId: "mine"},
			{Payload: []byte("c")},
		}
		if _, err := c.Enqueue(context.Background(), "q", msgs...); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 {
			t.Fatalf("attempts = %d, want 2", len(seen))
		}
		first, second := seen[0], seen[1]
		if strings.Join(first, ",") != strings.Join(second, ",") {
			t.Fatalf("dedup ids changed between attempts: %v then %v", first, second)
		}
		if first[1] != "mine" {
			t.Fatalf("caller's dedup id replaced: %v", first)
		}
		if first[0] == "" || first[2] == "" || first[0] == first[2] {
			t.Fatalf("generated dedup ids not unique: %v", first)
		}
		// Written back, so the caller can resend the same messages safely.
		if msgs[0].DedupId != first[0] {
			t.Fatalf("message carries %q, broker saw %q", msgs[0].DedupId, first[0])
		}
	})
}

func TestUpdateQueueMask(t *testing.T) {
	rec := newRecorder()
	c := dial(t, serve(t, &fakeBroker{name: "A", rec: rec}))
	cfg := &raftqv1.QueueConfig{VisibilityTimeoutMs: 5000}
	if _, err := c.UpdateQueue(context.Background(), "q", cfg, "visibility_timeout_ms", "throttles"); err != nil {
		t.Fatal(err)
	}
	calls, _ := rec.snapshot()
	req := calls[0].req.(*raftqv1.UpdateQueueRequest)
	if got := strings.Join(req.GetUpdateMask().GetPaths(), ","); got != "visibility_timeout_ms,throttles" {
		t.Fatalf("mask = %s", got)
	}
	_, err := c.UpdateQueue(context.Background(), "q", cfg, "visibility_timeout")
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad path: err = %v, want InvalidArgument", err)
	}
	if calls, _ := rec.snapshot(); len(calls) != 1 {
		t.Fatalf("bad mask reached the broker")
	}
}

func TestClusterStatusAsksTheNamedSeed(t *testing.T) {
	rec := newRecorder()
	leader := serve(t, &fakeBroker{name: "B", rec: rec})
	follower := serve(t, &fakeBroker{name: "A", rec: rec, unary: func(method string) error {
		if method == "Status" {
			return nil // answered locally
		}
		return notLeader(leader)
	}})
	c := dial(t, follower)
	// Learn the leader first; Status must still be answered by the seed.
	if _, err := c.EnqueuePayloads(context.Background(), "q", []byte("x")); err != nil {
		t.Fatal(err)
	}
	st, err := c.ClusterStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.GetLeaderId() != "A" {
		t.Fatalf("status answered by %q, want the seed A", st.GetLeaderId())
	}
}

func TestClosedClient(t *testing.T) {
	c := dial(t, serve(t, &fakeBroker{name: "A", rec: newRecorder()}))
	c.Close()
	_, err := c.EnqueuePayloads(context.Background(), "q", []byte("x"))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

func TestWaitForConnection(t *testing.T) {
	live := serve(t, &fakeBroker{name: "A", rec: newRecorder()})
	for _, tc := range []struct {
		name   string
		seeds  []string
		wantOK bool
	}{
		{"reachable", []string{deadAddr(t), live}, true},
		{"unreachable", []string{deadAddr(t)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			c, err := Dial(ctx, tc.seeds, WithWaitForConnection(), WithRetryPolicy(fastRetry()))
			if (err == nil) != tc.wantOK {
				t.Fatalf("err = %v, want ok=%v", err, tc.wantOK)
			}
			if c != nil {
				c.Close()
			}
		})
	}
}

func TestItemError(t *testing.T) {
	for _, tc := range []struct {
		r    *raftqv1.ItemResult
		want codes.Code
	}{
		{&raftqv1.ItemResult{Ok: true}, codes.OK},
		{&raftqv1.ItemResult{Code: int32(codes.FailedPrecondition), Error: "stale"}, codes.FailedPrecondition},
		{&raftqv1.ItemResult{Error: "??"}, codes.Unknown},
	} {
		if got := status.Code(ItemError(tc.r)); got != tc.want {
			t.Errorf("ItemError(%v) code = %v, want %v", tc.r, got, tc.want)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	p := RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond}.withDefaults()
	for n, ceiling := range map[int]time.Duration{1: 10, 2: 20, 3: 40, 4: 80, 10: 80, 100: 80} {
		for range 100 {
			if d := p.backoff(n); d < 0 || d > ceiling*time.Millisecond {
				t.Fatalf("backoff(%d) = %v, want within [0, %vms]", n, d, int64(ceiling))
			}
		}
	}
}

func TestAttemptTimeoutMovesPastHungNode(t *testing.T) {
	forEachEnqueuePath(t, func(t *testing.T, streams bool) {
		live := serve(t, &fakeBroker{streams: streams, name: "live", rec: newRecorder()})
		c := dial(t, hungAddr(t), live).WithRetryPolicy(RetryPolicy{AttemptTimeout: 100 * time.Millisecond, InitialBackoff: time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ids, err := c.EnqueuePayloads(ctx, "q", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != "live-0" {
			t.Fatalf("ids = %v", ids)
		}
	})
}

// A payload no queue can take, or a batch larger than a node reads, is
// refused before it is sent, with an error that says what is too large
// and the limit, instead of gRPC's "received message larger than max".
func TestEnqueueRefusesWhatNoNodeTakes(t *testing.T) {
	forEachEnqueuePath(t, func(t *testing.T, streams bool) {
		rec := newRecorder()
		c := dial(t, serve(t, &fakeBroker{streams: streams, name: "A", rec: rec}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		big := make([]byte, MaxPayloadBytes+1)
		_, err := c.EnqueuePayloads(ctx, "jobs", []byte("ok"), big)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "message 1's payload is 16.0 MiB (16777217 bytes); no queue accepts a payload over 16 MiB") {
			t.Fatalf("17 MiB payload: %v", err)
		}
		// Four payloads a queue may take, in one batch over what a node reads.
		p := make([]byte, MaxPayloadBytes)
		_, err = c.EnqueuePayloads(ctx, "jobs", p, p, p, p)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "batch of 4 messages is 64.0 MiB") || !strings.Contains(err.Error(), "over the 64 MiB a node reads") {
			t.Fatalf("64 MiB batch: %v", err)
		}
		if calls, _ := rec.snapshot(); len(calls) != 0 {
			t.Fatalf("refused batches reached the broker: %v", describe(calls))
		}
	})
}
