package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/protobuf/proto"
)

// TestQueueRetryFlags: --retry-initial/--retry-max/--retry-multiplier/
// --retry-jitter send QueueConfig.retry whole (mask path "retry") on
// create and update, --clear-retry clears it, and a half-given or
// conflicting policy is refused before any call.
func TestQueueRetryFlags(t *testing.T) {
	policy := &raftqv1.RetryPolicy{InitialDelayMs: 1000, MaxDelayMs: 300_000, Multiplier: 2, Jitter: 0.2}
	f := &fake{}
	addr := serve(t, f)
	r := raftq(t, addr, "", "queue", "create", "jobs", "--retry-initial", "1s", "--retry-max", "5m", "--retry-multiplier", "2", "--retry-jitter", "0.2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if reqs := requests[*raftqv1.CreateQueueRequest](f); len(reqs) != 1 || !proto.Equal(reqs[0].GetConfig().GetRetry(), policy) {
		t.Fatalf("create requests %v, want retry %v", reqs, policy)
	}
	for _, tc := range []struct {
		args []string
		want *raftqv1.RetryPolicy
	}{
		{[]string{"--retry-initial", "500ms", "--retry-max", "10s"}, &raftqv1.RetryPolicy{InitialDelayMs: 500, MaxDelayMs: 10_000, Multiplier: 2}},
		{[]string{"--clear-retry"}, nil},
	} {
		f := &fake{}
		r := raftq(t, serve(t, f), "", append([]string{"queue", "update", "q"}, tc.args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		reqs := requests[*raftqv1.UpdateQueueRequest](f)
		if len(reqs) != 1 || !slices.Equal(reqs[0].GetUpdateMask().GetPaths(), []string{"retry"}) || !proto.Equal(reqs[0].GetConfig().GetRetry(), tc.want) {
			t.Fatalf("%v: requests %v, want mask [retry] and retry %v", tc.args, reqs, tc.want)
		}
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--retry-initial", "1s"}, "needs --retry-initial and --retry-max"},
		{[]string{"--retry-jitter", "0.5"}, "needs --retry-initial and --retry-max"},
		{[]string{"--clear-retry", "--retry-max", "1s"}, "conflict"},
		{[]string{"--retry-initial", "-1s", "--retry-max", "1s"}, "must not be negative"},
	} {
		f := &fake{}
		r := raftq(t, serve(t, f), "", append([]string{"queue", "update", "q"}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) {
			t.Fatalf("%v: exit %d, stderr %q, want %q", tc.args, r.code, r.stderr, tc.wantErr)
		}
		if len(requests[*raftqv1.UpdateQueueRequest](f)) != 0 {
			t.Fatalf("%v: a bad update reached the broker", tc.args)
		}
	}
}

// TestQueueGetShowsRetry: queue get prints the policy, or says there is none.
func TestQueueGetShowsRetry(t *testing.T) {
	for _, tc := range []struct {
		p    *raftqv1.RetryPolicy
		want string
	}{
		{&raftqv1.RetryPolicy{InitialDelayMs: 1000, MaxDelayMs: 300_000, Multiplier: 2, Jitter: 0.2}, "1s, ×2 per attempt, at most 5m0s, ±20% jitter"},
		{nil, "none (redelivered at once)"},
	} {
		var b bytes.Buffer
		if err := printQueue(&b, &raftqv1.QueueInfo{Name: "q", Config: &raftqv1.QueueConfig{Retry: tc.p}, Stats: &raftqv1.QueueStats{}}, nil); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Fatalf("output lacks %q:\n%s", tc.want, b.String())
		}
	}
}
