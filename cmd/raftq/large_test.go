package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// largestDelivery is a delivery of the largest message a queue can hold:
// every field at its limit.
func largestDelivery() *raftqv1.Delivery {
	name := strings.Repeat("q", fsm.MaxQueueNameLen)
	d := &raftqv1.Delivery{
		Id: "18446744073709551615", Queue: name, Payload: bytes.Repeat([]byte("p"), fsm.MaxMessageBytesCap),
		Headers: map[string]string{}, Priority: -2147483648, FairnessKey: strings.Repeat("f", fsm.MaxKeyLen),
		Weight: 4294967295, Attempt: 1, EnqueuedAtMs: -1, LeaseToken: "18446744073709551615", LeaseDeadlineMs: -1,
		OriginQueue: name, DeadLetterReason: "max_deliveries",
	}
	per := fsm.MaxHeaderBytes / fsm.MaxHeaders
	for i := range fsm.MaxHeaders {
		k := fmt.Sprintf("h%02d-", i)
		d.Headers[k] = strings.Repeat("v", per-len(k))
	}
	for i := range fsm.MaxThrottleKeys {
		d.ThrottleKeys = append(d.ThrottleKeys, strings.Repeat(string(rune('a'+i)), fsm.MaxKeyLen))
	}
	return d
}

// TestLargestMessageWithDefaults: the CLI, with default settings, peeks and
// consumes the largest message a queue can hold (issue 11, item 1), and
// asks the broker for Lease responses as large as it accepts.
func TestLargestMessageWithDefaults(t *testing.T) {
	d := largestDelivery()
	if n := proto.Size(&raftqv1.LeaseResponse{Messages: []*raftqv1.Delivery{d}}); n > client.MaxReceiveBytes {
		t.Fatalf("the largest delivery takes %d bytes, the SDK accepts %d", n, client.MaxReceiveBytes)
	}
	f := &fake{deliveries: []*raftqv1.Delivery{d}}
	addr := serve(t, f)
	// 16 MiB through the race detector on a loaded machine can take more
	// than the helper's 3 s RPC timeout.
	r := raftq(t, addr, "", "--rpc-timeout", "9s", "peek", "q")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ID") || !strings.Contains(r.stdout, d.Id) {
		t.Fatalf("peek: exit %d: %s", r.code, r.stderr)
	}
	r = raftq(t, addr, "", "--rpc-timeout", "9s", "consume", "q", "--count", "1")
	if want := d.Id + "\tattempt=1\t" + string(d.Payload) + "\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("consume: exit %d, %d bytes printed, want %d: %s", r.code, len(r.stdout), len(want), r.stderr)
	}
	if l := requests[*raftqv1.LeaseRequest](f); len(l) != 1 || l[0].GetMaxBatchBytes() != client.MaxReceiveBytes {
		t.Fatalf("lease requests = %d, want one asking for max_batch_bytes %d", len(l), client.MaxReceiveBytes)
	}
}
