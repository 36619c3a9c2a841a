package fsm

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var writeRetryReplay = flag.Uint("write-retry-replay-fixture", 0, "write testdata/vN-retry-replay.txt for log version N (only ever from a build whose newest log version is N: v13 from 8e8c7a4, v14 from 473cc1e, v15 from 6492983, v16 from 75a9d78, v17 from cae24fc, v18 from cdd5735, v19 from d6af08f)")

// withRaw returns msg with raw appended to its encoding, decoded again:
// fields a newer build knows are written as bytes, so this test compiles
// and means the same in the build before them, which keeps them as
// unknown fields (as it does with any entry of a newer proposer).
func withRaw[T proto.Message](t *testing.T, msg T, raw []byte) T {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	out := msg.ProtoReflect().New().Interface().(T)
	if err := proto.Unmarshal(append(b, raw...), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// rawPolicy is QueueConfig.retry (field 13): RetryPolicy{initial, max,
// multiplier, jitter}.
func rawPolicy(initial, maxMs int64, mult, jitter float64) []byte {
	var p []byte
	p = protowire.AppendTag(p, 1, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(initial))
	p = protowire.AppendTag(p, 2, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(maxMs))
	p = protowire.AppendTag(p, 3, protowire.Fixed64Type)
	p = protowire.AppendFixed64(p, math.Float64bits(mult))
	p = protowire.AppendTag(p, 4, protowire.Fixed64Type)
	p = protowire.AppendFixed64(p, math.Float64bits(jitter))
	var b []byte
	b = protowire.AppendTag(b, 13, protowire.BytesType)
	return protowire.AppendBytes(b, p)
}

// retryScenario drives h at log version v through every entry log version
// 20 (retry backoff) gives a meaning to: a queue config carrying a retry
// policy (also an invalid one), a nack carrying retry_delay_ms (field 6),
// a LeaseExpire carrying retry_delays_ms (field 2), an update naming the
// mask path "retry", and grants after each to see whether the message
// was delayed.
func retryScenario(t *testing.T, h *harness, v uint32, step func(Result)) {
	do := func(cmd *fsmv1.Command) Result {
		t.Helper()
		res := h.apply(cmd)
		step(res)
		return res
	}
	grant := func(q string, token uint64, id uint64) *fsmv1.Ref {
		do(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: []*fsmv1.Grant{{Queue: q, MessageId: id, ConsumerId: "c1", DeadlineMs: h.now + 1000, LeaseToken: token}}}}})
		return &fsmv1.Ref{Queue: q, MessageId: id, LeaseToken: token}
	}
	tick := func(ms int64) {
		h.now += ms
		do(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}})
	}
	h.raise(v)
	cfg := withRaw(t, &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000, MaxDeliveries: 5}, rawPolicy(500, 4000, 2, 0.5))
	do(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "r", Config: cfg}}})
	bad := withRaw(t, &fsmv1.QueueConfig{}, rawPolicy(10, 5, 0.5, 2))
	do(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "bad", Config: bad}}})
	res := do(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "r", Messages: []*fsmv1.EnqueueMessage{{Payload: []byte("m")}}}}}}})
	id := res.(*EnqueueResult).Batches[0].IDs[0]

	// A nack carrying retry_delay_ms 700.
	r := grant("r", 11, id)
	n := withRaw(t, &fsmv1.NackOne{Ref: r}, protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 700))
	do(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{n}}}})
	tick(100)
	grant("r", 12, id) // older versions: ready at once

	// A LeaseExpire carrying retry_delays_ms [900].
	tick(1500)
	r = &fsmv1.Ref{Queue: "r", MessageId: id, LeaseToken: 12}
	delays := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendVarint(nil, 900))
	do(&fsmv1.Command{Op: &fsmv1.Command_LeaseExpire{LeaseExpire: withRaw(t, &fsmv1.LeaseExpire{Refs: []*fsmv1.Ref{r}}, delays)}})
	tick(100)
	grant("r", 13, id)

	// The update-mask path "retry".
	do(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "r", Config: &fsmv1.QueueConfig{}, Mask: []string{"retry"}}}})
	do(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: "r", Config: &fsmv1.QueueConfig{MaxDeliveries: 6}, Mask: []string{"max_deliveries"}}}})
	tick(5000)
}

// TestRetryEntriesReplayAsBefore: entries of log versions 13 to 19 that
// carry the fields version 20 reads (a config's retry policy, valid or
// not, a nack's retry_delay_ms, a LeaseExpire's retry_delays_ms, the mask
// path "retry") apply exactly as the build whose newest version they were
// applied them: the same answer and the same digest after every entry
// (testdata/v13-retry-replay.txt, written by 8e8c7a4, and
// v14-retry-replay.txt, by 473cc1e, v15-retry-replay.txt, by 6492983, v16-retry-replay.txt, by 75a9d78, v17-retry-replay.txt, by cae24fc, v18-retry-replay.txt, by cdd5735, v19-retry-replay.txt, by d6af08f): nothing is delayed, the policy is
// kept as data nobody reads, the mask path is refused.
func TestRetryEntriesReplayAsBefore(t *testing.T) {
	for _, v := range []uint32{13, 14, 15, 16, 17, 18, 19} {
		t.Run(fmt.Sprint("version", v), func(t *testing.T) {
			h := newHarness(t)
			var got []string
			retryScenario(t, h, v, func(res Result) {
				got = append(got, fmt.Sprintf("%d %s %s", h.index, digestOf(t, h.f), summary(res)))
			})
			path := filepath.Join("testdata", fmt.Sprintf("v%d-retry-replay.txt", v))
			if *writeRetryReplay == uint(v) {
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
