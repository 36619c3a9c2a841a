package main

import (
	"slices"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestStaleFlag: --stale on the read commands sends the read with
// raftq-read-consistency: stale (client.StaleRead), and without it the
// read carries no header (linearizable, the default).
func TestStaleFlag(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		method string
	}{
		{[]string{"queue", "get", "q"}, raftqv1.Broker_GetQueue_FullMethodName},
		{[]string{"queue", "list"}, raftqv1.Broker_ListQueues_FullMethodName},
		{[]string{"peek", "q"}, raftqv1.Broker_Peek_FullMethodName},
		{[]string{"consumers", "q"}, raftqv1.Broker_ListConsumers_FullMethodName},
	} {
		for _, stale := range []bool{false, true} {
			args, want := tc.args, tc.method+"="
			if stale {
				args, want = append(slices.Clone(args), "--stale"), want+"stale"
			}
			t.Run(tc.method+map[bool]string{false: "", true: " --stale"}[stale], func(t *testing.T) {
				f := &fake{}
				r := raftq(t, serve(t, f), "", args...)
				if r.code != 0 {
					t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
				}
				f.mu.Lock()
				got := slices.Clone(f.consistency)
				f.mu.Unlock()
				if !slices.Contains(got, want) {
					t.Fatalf("%v sent %v, want %s", args, got, want)
				}
			})
		}
	}
}
