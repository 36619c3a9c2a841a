package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// TestVersion12NeedsEveryVoter: on a cluster below log version 12, each
// request that needs it is refused before anything is proposed, naming
// the version (the transport answers ErrNeedsVersion FAILED_PRECONDITION):
// a nack handing a delivery back unprocessed with a delay (an older entry
// drops the delay), the max_queues setting (an older entry drops it), and
// naming an existing ordinary queue as dead-letter queue (an older entry
// converts it even when it is in use). Only the state is consulted: this
// broker has no Raft node to propose through.
func TestVersion12NeedsEveryVoter(t *testing.T) {
	f := fsm.New(fsm.Options{})
	for i, cmd := range []*fsmv1.Command{
		{Version: fsm.GuardVersion - 1, NowMs: 1000, Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: fsm.GuardVersion - 1}}},
		{Version: fsm.GuardVersion - 1, NowMs: 1000, Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "b.jobs"}}},
	} {
		if err := f.ApplyCommand(uint64(i+1), cmd).Failure(); err != nil {
			t.Fatal(err)
		}
	}
	b := &Broker{state: f, reads: f.Reader(), versions: versionGate{reads: f.Reader()}}
	ctx := context.Background()
	n := int64(5)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNeedsVersion) || !strings.Contains(err.Error(), fmt.Sprint("log version ", fsm.GuardVersion)) {
			t.Errorf("%s: %v, want ErrNeedsVersion naming log version %d", what, err, fsm.GuardVersion)
		}
	}
	_, err := b.Nack(ctx, []NackItem{{Ref: LeaseRef{Queue: "b.jobs", MessageID: 1, Token: 1}, Unprocessed: true, DelayMs: 500}})
	check("unprocessed nack with a delay", err)
	_, err = b.Operator().SetClusterSettings(ctx, SettingsChange{MaxQueues: &n})
	check("max_queues", err)
	_, err = b.Queues().CreateQueue(ctx, "a.x", &raftqv1.QueueConfig{DeadLetterQueue: "b.jobs"})
	check("an ordinary queue as dead_letter_queue", err)
	if qi, err := f.Reader().GetQueue("b.jobs"); err != nil || qi.IsDeadLetterQueue {
		t.Fatalf("b.jobs: %+v %v", qi, err)
	}
}

// TestAuditWaitFollowsItsCost: the counter audit rests its interval after
// a cheap tick and auditPace times a costly one, so it takes at most
// about 1/auditPace of a core whatever the queues hold.
func TestAuditWaitFollowsItsCost(t *testing.T) {
	for _, tc := range []struct{ interval, took, want time.Duration }{
		{time.Second, time.Millisecond, time.Second},
		{time.Second, 20 * time.Millisecond, time.Second},
		{time.Second, 60 * time.Millisecond, 3 * time.Second},
		{100 * time.Millisecond, 10 * time.Millisecond, 500 * time.Millisecond},
	} {
		if got := auditWait(tc.interval, tc.took); got != tc.want {
			t.Errorf("auditWait(%v, %v) = %v, want %v", tc.interval, tc.took, got, tc.want)
		}
	}
}
