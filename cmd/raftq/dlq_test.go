package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// The DLQ workbench flags reach the broker as the fields they name.
func TestPeekAndRedriveFilters(t *testing.T) {
	f := &fake{deliveries: deliveries(1)}
	addr := serve(t, f)
	r := raftq(t, addr, "", "peek", "jobs", "--dlq", "--key", "tenant-a", "--reason", "timeout", "--older-than", "1h", "--after", "0000000000000010")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := &raftqv1.PeekRequest{Queue: "jobs", Limit: 10, DeadLetter: true, FairnessKey: "tenant-a", ReasonContains: "timeout", OlderThanMs: 3_600_000, AfterId: "0000000000000010"}
	if reqs := requests[*raftqv1.PeekRequest](f); len(reqs) != 1 || !proto.Equal(reqs[0], want) {
		t.Fatalf("peek requests = %v, want %v", reqs, want)
	}

	for _, c := range []struct {
		args []string
		want *raftqv1.RedriveRequest
		out  string
	}{
		{[]string{"--dry-run", "--reason", "timeout"}, &raftqv1.RedriveRequest{Queue: "q", DryRun: true, ReasonContains: "timeout"}, "would move 7 messages back to q (dry run: nothing moved)"},
		{[]string{"--rate", "100", "--key", "tenant-a", "--older-than", "30m"}, &raftqv1.RedriveRequest{Queue: "q", RatePerSec: 100, FairnessKey: "tenant-a", OlderThanMs: 1_800_000}, "moved 7 messages back to q"},
		{[]string{"--ids", "0000000000000001,0000000000000002"}, &raftqv1.RedriveRequest{Queue: "q", MessageIds: []string{"0000000000000001", "0000000000000002"}}, "moved 7 messages back to q"},
		{[]string{"--cancel", "0000000000a00000"}, &raftqv1.RedriveRequest{Queue: "q", CancelJob: "0000000000a00000"}, "cancelled redrive job 0000000000a00000 of q; it had moved 7 messages"},
	} {
		f.reset()
		r := raftq(t, addr, "", append([]string{"redrive", "q"}, c.args...)...)
		if r.code != 0 || !strings.Contains(r.stdout, c.out) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", c.args, r.code, r.stdout, r.stderr)
		}
		reqs := requests[*raftqv1.RedriveRequest](f)
		if len(reqs) != 1 || reqs[0].IdempotencyKey == "" {
			t.Fatalf("%v: requests %v, want one with an idempotency key", c.args, reqs)
		}
		reqs[0].IdempotencyKey = ""
		if !proto.Equal(reqs[0], c.want) {
			t.Fatalf("%v: request %v, want %v", c.args, reqs[0], c.want)
		}
	}
	for _, bad := range [][]string{
		{"redrive", "q", "--older-than", "-1h"},
		{"redrive", "q", "--rate", "-3"},
		{"peek", "q", "--older-than", "1h"}, // not --dlq
	} {
		f.reset()
		if r := raftq(t, addr, "", bad...); r.code == 0 || len(f.reqs) != 0 {
			t.Fatalf("%v: exit %d, %d requests sent; want a refusal before any call", bad, r.code, len(f.reqs))
		}
	}
}

// reset forgets the requests recorded so far.
func (f *fake) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = nil
}
