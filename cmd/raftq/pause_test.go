package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func pausedQueue() *raftqv1.QueueInfo {
	q := queueInfo("jobs", &raftqv1.QueueConfig{VisibilityTimeoutMs: 30000})
	q.Paused, q.PausedUntilMs = true, 1_700_000_600_000
	q.PausedKeys = []*raftqv1.PausedKey{{Key: "tenant-a", UntilMs: 0}}
	return q
}

// PauseQueue answers a queue whose whole-queue pause and one key's pause
// are set.
func (f *fake) PauseQueue(_ context.Context, r *raftqv1.PauseQueueRequest) (*raftqv1.PauseQueueResponse, error) {
	f.record(r)
	return &raftqv1.PauseQueueResponse{Queue: pausedQueue()}, nil
}

func (f *fake) ResumeQueue(_ context.Context, r *raftqv1.ResumeQueueRequest) (*raftqv1.ResumeQueueResponse, error) {
	f.record(r)
	return &raftqv1.ResumeQueueResponse{Queue: queueInfo("jobs", nil)}, nil
}

// TestQueuePauseAndResume: `queue pause` and `queue resume` send what
// their flags say, print what they did, and `queue get` shows the pauses.
func TestQueuePauseAndResume(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "pause", "jobs"}, "paused queue jobs until resumed\n"},
		{[]string{"queue", "pause", "jobs", "--key", "tenant-a", "--for", "10m"}, "paused fairness key tenant-a of queue jobs for 10m0s\n"},
		{[]string{"queue", "resume", "jobs", "--key", "tenant-a"}, "resumed fairness key tenant-a of queue jobs\n"},
		{[]string{"queue", "resume", "jobs"}, "resumed queue jobs\n"},
	} {
		r := raftq(t, addr, "", tc.args...)
		if r.code != 0 || r.stdout != tc.want {
			t.Errorf("%v: exit %d, stdout %q (stderr %q), want %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	pauses := requests[*raftqv1.PauseQueueRequest](f)
	wantP := []*raftqv1.PauseQueueRequest{{Name: "jobs"}, {Name: "jobs", FairnessKey: "tenant-a", DurationMs: 600_000}}
	if len(pauses) != 2 || !proto.Equal(pauses[0], wantP[0]) || !proto.Equal(pauses[1], wantP[1]) {
		t.Fatalf("pause requests %v, want %v", pauses, wantP)
	}
	resumes := requests[*raftqv1.ResumeQueueRequest](f)
	if len(resumes) != 2 || !proto.Equal(resumes[0], &raftqv1.ResumeQueueRequest{Name: "jobs", FairnessKey: "tenant-a"}) || !proto.Equal(resumes[1], &raftqv1.ResumeQueueRequest{Name: "jobs"}) {
		t.Fatalf("resume requests %v", resumes)
	}
	var out strings.Builder
	if err := printQueue(&out, pausedQueue(), nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"paused:", "until 2023-11-14T22:23:20Z", "paused keys:", "paused fairness keys:", "tenant-a", "until resumed"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("queue get lacks %q:\n%s", w, out.String())
		}
	}
	r := raftq(t, addr, "", "--json", "queue", "pause", "jobs")
	if !strings.Contains(r.stdout, `"paused":true`) || !strings.Contains(r.stdout, `"paused_keys"`) {
		t.Errorf("--json pause: %s", r.stdout)
	}
	if r := raftq(t, addr, "", "queue", "pause", "jobs", "--for", "-1s"); r.code == 0 || !strings.Contains(r.stderr, "--for") {
		t.Errorf("--for -1s: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := len(requests[*raftqv1.PauseQueueRequest](f)); n != 3 {
		t.Errorf("%d pause requests, want 3 (a bad --for sends none)", n)
	}
}
