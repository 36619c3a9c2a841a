package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func TestConsumers(t *testing.T) {
	f := &fake{consumers: []*raftqv1.ConsumerInfo{
		{Name: "worker-1", Address: "127.0.0.1:53122", ConnectedSinceMs: time.Now().Add(-90 * time.Second).UnixMilli(), InFlight: 3, Delivered: 40, Acked: 37, Credit: 61},
		{Address: "127.0.0.1:40000", ConnectedSinceMs: time.Now().UnixMilli()},
	}}
	addr := serve(t, f)
	r := raftq(t, addr, "", "consumers", "q")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
	}
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"NAME", "ADDRESS", "IDENTITY", "CONNECTED", "IN", "FLIGHT", "DELIVERED", "ACKED", "CREDIT"}) {
		t.Errorf("header = %q", lines[0])
	}
	if got, want := strings.Fields(lines[1]), []string{"worker-1", "127.0.0.1:53122", "-", "1m30s", "ago", "3", "40", "37", "61"}; !slices.Equal(got, want) {
		t.Errorf("row = %q, want fields %q", lines[1], want)
	}
	if got := strings.Fields(lines[2]); len(got) < 2 || got[0] != "-" {
		t.Errorf("an unnamed consumer's row = %q, want NAME -", lines[2])
	}
	reqs := requests[*raftqv1.ListConsumersRequest](f)
	if len(reqs) != 1 || reqs[0].GetQueue() != "q" {
		t.Fatalf("requests = %v", reqs)
	}

	r = raftq(t, addr, "", "--json", "consumers", "q")
	var resp raftqv1.ListConsumersResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("--json output is not a ListConsumersResponse: %v\n%s", err, r.stdout)
	}
	if len(resp.Consumers) != 2 || resp.Consumers[0].GetName() != "worker-1" || resp.Consumers[0].GetAcked() != 37 {
		t.Errorf("--json = %v", &resp)
	}

	r = raftq(t, addr, "", "consumers", "nope")
	if r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("unknown queue: exit %d, stderr %q", r.code, r.stderr)
	}
}
