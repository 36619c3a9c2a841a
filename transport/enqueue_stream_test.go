package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testEnqueueStream checks that each streamed request is answered once,
// under its own seq, exactly as a unary Enqueue would answer it, on the
// leader and (forwarded) on a follower.
func testEnqueueStream(t *testing.T, c *testcluster.Cluster) {
	mustCreate(t, c.Leader(), "es", &raftqv1.QueueConfig{MaxMessageBytes: 16})
	msg := func(p string) *raftqv1.EnqueueRequest {
		return &raftqv1.EnqueueRequest{Queue: "es", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte(p)}}}
	}
	bad := map[uint64]struct {
		req  *raftqv1.EnqueueRequest
		code codes.Code
	}{
		3: {nil, codes.InvalidArgument},
		4: {&raftqv1.EnqueueRequest{Queue: "no such queue!", Messages: msg("x").Messages}, codes.InvalidArgument},
		5: {&raftqv1.EnqueueRequest{Queue: "absent", Messages: msg("x").Messages}, codes.NotFound},
		6: {&raftqv1.EnqueueRequest{Queue: "es"}, codes.InvalidArgument},
		7: {msg("longer than sixteen bytes"), codes.InvalidArgument},
	}
	const requests = 40
	total := 0
	for _, n := range []*testcluster.Node{c.Leader(), c.Followers()[0]} {
		t.Run("via "+n.ID, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := n.Broker.EnqueueStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= requests; seq++ {
				req := msg(fmt.Sprintf("m%d", seq))
				if b, ok := bad[seq]; ok {
					req = b.req
				}
				if err := st.Send(&raftqv1.EnqueueStreamRequest{Seq: seq, Request: req}); err != nil {
					t.Fatalf("send %d: %v", seq, err)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			answered := map[uint64]bool{}
			for {
				r, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break // every request answered, then the server ended the stream
				}
				if err != nil {
					t.Fatalf("recv after %d answers: %v", len(answered), err)
				}
				if answered[r.Seq] || r.Seq < 1 || r.Seq > requests {
					t.Fatalf("seq %d answered twice or never asked", r.Seq)
				}
				answered[r.Seq] = true
				if b, ok := bad[r.Seq]; ok {
					if r.Response != nil || codes.Code(r.GetError().GetCode()) != b.code {
						t.Fatalf("seq %d: %v, want error %v", r.Seq, r, b.code)
					}
					continue
				}
				if r.Error != nil || len(r.GetResponse().GetMessageIds()) != 1 {
					t.Fatalf("seq %d: %v, want one message id", r.Seq, r)
				}
			}
			if len(answered) != requests {
				t.Fatalf("%d of %d requests answered", len(answered), requests)
			}
			total += requests - len(bad)
		})
	}
	// Bad requests changed nothing; good ones each enqueued one message.
	if got := queueInfo(t, c.Leader(), "es").Stats.Ready; got != int64(total) {
		t.Fatalf("ready = %d, want %d", got, total)
	}
}

// TestEnqueueStreamEndsOnStop: an open EnqueueStream must not hold a
// stopping server until its deadline; the client is told Unavailable, so
// it retries elsewhere.
func TestEnqueueStreamEndsOnStop(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	n := c.Leader()
	mustCreate(t, n, "stop", nil)
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := n.Broker.EnqueueStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &raftqv1.EnqueueRequest{Queue: "stop", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}
	if err := st.Send(&raftqv1.EnqueueStreamRequest{Seq: 1, Request: req}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Recv(); err != nil || r.Error != nil {
		t.Fatalf("first answer: %v, %v", r, err)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	n.API().Stop(stopCtx)
	if stopCtx.Err() != nil {
		t.Fatal("Stop ran into its deadline: the open EnqueueStream held GracefulStop")
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after Stop: %v, want Unavailable", err)
	}
}
