package fsm

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var writeReplay = flag.Uint("write-replay-fixture", 0, "write testdata/vN-replay.txt for log version N (only ever from a build whose newest log version is N: v10 from a06a22b, v11 from c8aff50, v13 from db3e4a8)")

// replayFixture is testdata/vN-replay.txt: what the build whose newest
// log version was N answered and held after each entry of
// olderScenario at version N.
func replayFixture(v uint32) string { return fmt.Sprintf("v%d-replay.txt", v) }

// summary is a result as the transcript records it: the whole-command
// error and each item's, and what a queue result says of its queue.
func summary(res Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%T err=%v", res, res.Failure())
	switch r := res.(type) {
	case *QueueResult:
		if r.Queue != nil {
			fmt.Fprintf(&b, " queue=%s dlq=%v cfg.dlq=%s", r.Queue.Name, r.Queue.IsDeadLetterQueue, r.Queue.Config.GetDeadLetterQueue())
		}
	case *EnqueueResult:
		for _, bt := range r.Batches {
			fmt.Fprintf(&b, " batch(%v %v)", bt.IDs, bt.Err)
		}
	case *ItemsResult:
		fmt.Fprintf(&b, " items=%v", r.Items)
	case *GrantResult:
		fmt.Fprintf(&b, " items=%v", r.Items)
	case *ExtendResult:
		fmt.Fprintf(&b, " items=%v deadlines=%v", r.Items, r.Deadlines)
	case *CountResult:
		fmt.Fprintf(&b, " count=%d", r.Count)
	}
	return b.String()
}

// withUnknownMaxQueues is SetClusterSettings carrying field 2 (varint
// n) as raw bytes: max_queues in builds from log version 11, an unknown
// field to the build before, which this scenario was recorded with.
func withUnknownMaxQueues(t *testing.T, maxQueuedBytes, n int64) *fsmv1.Command {
	t.Helper()
	b, err := proto.Marshal(&fsmv1.SetClusterSettings{MaxQueuedBytes: &maxQueuedBytes})
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(n))
	s := &fsmv1.SetClusterSettings{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	return &fsmv1.Command{Op: &fsmv1.Command_SetClusterSettings{SetClusterSettings: s}}
}

// olderScenario drives h, at log version v, through every rule log
// version 12 changes, and calls step after each entry:
//   - CreateQueue naming an ordinary queue that holds messages as its
//     dead-letter queue (converted, its own DLQ dropped), and an empty one;
//   - a dead-letter queue left behind when its origin is deleted;
//   - Nack{unprocessed, delay_ms} (the delay is dropped);
//   - Redrive of messages dead-lettered by max_deliveries and by TTL, and
//     time passing after it (no TTL any more);
//   - SetClusterSettings carrying max_queues (field 2, ignored), then more
//     queues than it allows;
//   - Extend and Ack after the lease deadline, before LeaseExpire.
func olderScenario(t *testing.T, h *harness, v uint32, step func(Result)) {
	do := func(cmd *fsmv1.Command) Result {
		t.Helper()
		res := h.apply(cmd)
		step(res)
		return res
	}
	create := func(name string, cfg *fsmv1.QueueConfig) Result {
		return do(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: name, Config: cfg}}})
	}
	enqueue := func(q string, msgs ...*fsmv1.EnqueueMessage) []uint64 {
		t.Helper()
		res := do(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: q, Messages: msgs}}}}})
		ids := make([]uint64, len(msgs)) // a build that refuses goes on with unknown ids
		if r, ok := res.(*EnqueueResult); ok && len(r.Batches) == 1 && r.Batches[0].Err == nil {
			copy(ids, r.Batches[0].IDs)
		}
		return ids
	}
	grant := func(q string, vis int64, token uint64, id uint64) *fsmv1.Ref {
		do(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{{Queue: q, MessageId: id, ConsumerId: "c1", DeadlineMs: h.now + vis, LeaseToken: token}}}}})
		return &fsmv1.Ref{Queue: q, MessageId: id, LeaseToken: token}
	}
	nack := func(n *fsmv1.NackOne) Result {
		return do(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{n}}}})
	}
	redrive := func(q string) Result {
		return do(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: q}}})
	}
	tick := func(ms int64) Result {
		h.now += ms
		return do(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}})
	}
	p := func(s string) *fsmv1.EnqueueMessage { return &fsmv1.EnqueueMessage{Payload: []byte(s)} }

	h.raise(v)
	// A queue holding messages, named as another's dead-letter queue.
	create("b.jobs", nil)
	enqueue("b.jobs", p("b1"), p("b2"), p("b3"))
	create("a.x", &fsmv1.QueueConfig{DeadLetterQueue: "b.jobs"})
	// An empty one, whose origin is then deleted.
	create("e", nil)
	create("f", &fsmv1.QueueConfig{DeadLetterQueue: "e", MaxDeliveries: 1})
	ids := enqueue("f", p("f1"))
	nack(&fsmv1.NackOne{Ref: grant("f", 1000, 11, ids[0])})
	do(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "f"}}})
	create("g", &fsmv1.QueueConfig{DeadLetterQueue: "e"})

	// Nack{unprocessed, delay_ms}.
	create("n", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
	ids = enqueue("n", p("n1"))
	nack(&fsmv1.NackOne{Ref: grant("n", 1000, 21, ids[0]), Uncounted: true, DelayMs: 500})
	tick(100)
	grant("n", 1000, 22, ids[0])

	// Redrive and TTL.
	create("t", &fsmv1.QueueConfig{MessageTtlMs: 1000, MaxDeliveries: 1})
	ids = enqueue("t", p("t1"), p("t2"))
	nack(&fsmv1.NackOne{Ref: grant("t", 1000, 31, ids[0])})
	tick(1500) // t2's TTL passes: to the DLQ with reason ttl
	redrive("t")
	tick(2000)
	tick(2000)
	ids = enqueue("t", &fsmv1.EnqueueMessage{Payload: []byte("t3"), TtlMs: 300})
	tick(400)
	redrive("t")
	tick(5000)

	// max_queues, then more queues than it allows.
	do(withUnknownMaxQueues(t, 0, 3))
	for i := range 4 {
		create(fmt.Sprint("many", i), nil)
	}

	// Extend and Ack after the deadline, before LeaseExpire.
	create("l", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
	ids = enqueue("l", p("l1"), p("l2"))
	r1, r2 := grant("l", 1000, 41, ids[0]), grant("l", 1000, 42, ids[1])
	tick(1500)
	do(&fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: []*fsmv1.Ref{r1}, ExtendByMs: 1000}}})
	do(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: []*fsmv1.Ref{r2}}}})
	do(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{r1}}}})
	if v < 13 {
		return // the fixtures of versions 10 and 11 end here
	}

	// What log version 18 (HistoryVersion) changes: grants naming their
	// consumer, nacks with reasons (one past 1 KiB), extensions, expiry,
	// a consumer released, dead-lettering, redrive and acks record
	// nothing in older entries, and cost nothing more.
	create("h", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000, MaxDeliveries: 3})
	ids = enqueue("h", p("h1"), p("h2"))
	named := func(token, id uint64) *fsmv1.Ref {
		do(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{{Queue: "h", MessageId: id, ConsumerId: "c2", ConsumerName: "worker", DeadlineMs: h.now + 1000, LeaseToken: token}}}}})
		return &fsmv1.Ref{Queue: "h", MessageId: id, LeaseToken: token}
	}
	nack(&fsmv1.NackOne{Ref: named(51, ids[0]), Reason: strings.Repeat("r", 2000)})
	r3 := named(52, ids[0])
	do(&fsmv1.Command{Op: &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: []*fsmv1.Ref{r3}, ExtendByMs: 1000}}})
	tick(2500)
	do(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{r3}}}})
	named(53, ids[0])
	named(54, ids[1])
	do(&fsmv1.Command{Op: &fsmv1.Command_ReleaseConsumer{ReleaseConsumer: &fsmv1.ReleaseConsumer{ConsumerId: "c2"}}})
	redrive("h")
	do(&fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: []*fsmv1.Ref{named(55, ids[0])}}}})
	do(&fsmv1.Command{Op: &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: []*fsmv1.Ref{named(56, ids[1])}}}})
}

// TestOlderEntriesReplayAsBefore: entries of log versions 10 and 11
// covering every rule that changed in version 12, and of version 13
// covering those of version 18 too, apply exactly as the build whose
// newest version they were applied them: the same answer and the same
// state digest after every entry (testdata/v10-replay.txt, written by
// a06a22b, v11-replay.txt, by c8aff50, v13-replay.txt by db3e4a8 with
// this scenario).
func TestOlderEntriesReplayAsBefore(t *testing.T) {
	for _, v := range []uint32{10, 11, 13} {
		t.Run(fmt.Sprint("version", v), func(t *testing.T) {
			h := newHarness(t)
			var got []string
			olderScenario(t, h, v, func(res Result) {
				got = append(got, fmt.Sprintf("%d %s %s", h.index, digestOf(t, h.f), summary(res)))
			})
			path := filepath.Join("testdata", replayFixture(v))
			if *writeReplay == uint(v) {
				if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			sc := bufio.NewScanner(bytes.NewReader(raw))
			for sc.Scan() {
				want = append(want, sc.Text())
			}
			if len(got) != len(want) {
				t.Fatalf("%d entries, the fixture has %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("entry %d differs from the build of log version %d:\ngot  %s\nwant %s", i+1, v, got[i], want[i])
				}
			}
		})
	}
}
