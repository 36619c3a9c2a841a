package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
)

// TestRPCMetrics: calls are counted by method and code, whether the
// method's children were resolved up front (ours) or not (health), and
// streamed enqueues by code.
func TestRPCMetrics(t *testing.T) {
	c := startInproc(t, inprocOpts{nodes: 1})
	n := c.Leader()
	m := n.API().RPCMetrics()
	count := func(method string, code codes.Code) float64 {
		return testutil.ToFloat64(m.RPCs.WithLabelValues(method, code.String()))
	}
	getQueue := raftqv1.Broker_GetQueue_FullMethodName
	mustCreate(t, n, "metrics", nil)
	okBefore, badBefore := count(getQueue, codes.OK), count(getQueue, codes.InvalidArgument)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := n.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "metrics"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Broker.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "bad name!"}); err == nil {
		t.Fatal("GetQueue with a bad name succeeded")
	}
	if got := count(getQueue, codes.OK) - okBefore; got != 3 {
		t.Errorf("GetQueue OK counted %v times, want 3", got)
	}
	if got := count(getQueue, codes.InvalidArgument) - badBefore; got != 1 {
		t.Errorf("GetQueue InvalidArgument counted %v times, want 1", got)
	}
	if got := testutil.CollectAndCount(m.Latency, "raftq_rpc_duration_seconds"); got == 0 {
		t.Error("no latency series")
	}

	st, err := n.Broker.EnqueueStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	okStreamed := testutil.ToFloat64(m.StreamedOK)
	req := &raftqv1.EnqueueRequest{Queue: "metrics", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}
	for seq := range uint64(2) {
		if err := st.Send(&raftqv1.EnqueueStreamRequest{Seq: seq, Request: req}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(m.StreamedOK) - okStreamed; got != 2 {
		t.Errorf("streamed enqueues counted %v times, want 2", got)
	}
}
