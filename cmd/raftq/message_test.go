package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/protobuf/proto"
)

func (f *fake) GetMessage(_ context.Context, r *raftqv1.GetMessageRequest) (*raftqv1.GetMessageResponse, error) {
	f.record(r)
	return f.message, nil
}

// TestMessageShow: `raftq message show QUEUE ID` asks GetMessage for that
// message and prints its state, last error, attempts and events; --json
// prints the response.
func TestMessageShow(t *testing.T) {
	f := &fake{message: &raftqv1.GetMessageResponse{
		State: "dead_lettered",
		Message: &raftqv1.Delivery{Id: "0000000000600000", Queue: "jobs.dlq", Attempt: 3, OriginQueue: "jobs", DeadLetterReason: "max_deliveries",
			LastError: "db timeout",
			History: []*raftqv1.Attempt{
				{Attempt: 1, Consumer: "worker-a", LeasedAtMs: 1_700_000_000_000, EndedAtMs: 1_700_000_001_000, Outcome: "nacked", Reason: "db timeout"},
				{Attempt: 2, Consumer: "worker-b", LeasedAtMs: 1_700_000_002_000, EndedAtMs: 1_700_000_032_000, Outcome: "expired", Reason: "lease expired"},
			}},
		Events: []*raftqv1.MessageEvent{
			{AtMs: 1_699_999_999_000, Kind: "enqueued", Detail: "into jobs"},
			{AtMs: 1_700_000_000_000, Kind: "leased", Detail: "consumer worker-a, attempt 1"},
			{AtMs: 1_700_000_040_000, Kind: "dead_lettered", Detail: "to jobs.dlq: max_deliveries"},
		},
	}}
	addr := serve(t, f)
	r := raftq(t, addr, "", "message", "show", "jobs", "0000000000600000")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"dead_lettered, attempt 3", "dead-lettered from jobs: max_deliveries", "last error: db timeout",
		"worker-a", "2023-11-14T22:13:20.000Z", "expired", "lease expired", "enqueued", "to jobs.dlq: max_deliveries"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	reqs := requests[*raftqv1.GetMessageRequest](f)
	if want := (&raftqv1.GetMessageRequest{Queue: "jobs", MessageId: "0000000000600000"}); len(reqs) != 1 || !proto.Equal(reqs[0], want) {
		t.Fatalf("requests = %v", reqs)
	}
	r = raftq(t, addr, "", "--json", "message", "show", "jobs", "0000000000600000")
	var got struct {
		State   string
		Message struct {
			History []struct{ Consumer, Outcome string }
		}
		Events []struct{ Kind string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.State != "dead_lettered" || len(got.Message.History) != 2 || len(got.Events) != 3 {
		t.Fatalf("--json: %v %+v\n%s", err, got, r.stdout)
	}
	if r := raftq(t, addr, "", "message", "show", "jobs"); r.code == 0 {
		t.Fatal("message show without an id succeeded")
	}
}
