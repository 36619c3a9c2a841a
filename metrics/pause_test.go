package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// TestQueuePauseSeries: raftq_queue_paused is 1 only for a whole-queue
// pause, raftq_queue_paused_keys counts the keys paused on their own.
func TestQueuePauseSeries(t *testing.T) {
	const nowMs = 1_700_000_000_000
	f := buildState(t, 2, 0, 1, nowMs)
	index := uint64(100)
	apply := func(op *fsmv1.Command) {
		t.Helper()
		index++
		op.NowMs, op.Version = nowMs, fsm.PauseVersion
		if err := f.ApplyCommand(index, op).Failure(); err != nil {
			t.Fatal(err)
		}
	}
	apply(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: fsm.PauseVersion}}})
	apply(&fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: "q0000"}}})
	apply(&fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: "q0001", FairnessKey: "a"}}})
	apply(&fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: "q0001", FairnessKey: "b", DurationMs: 60_000}}})
	c := NewQueueCollector(f.Reader(), nil, func() time.Time { return time.UnixMilli(nowMs) }, nil)
	want := `
# HELP raftq_queue_paused 1 while the whole queue is paused (PauseQueue without a fairness key): nothing of it is delivered; 0 otherwise.
# TYPE raftq_queue_paused gauge
raftq_queue_paused{queue="q0000"} 1
raftq_queue_paused{queue="q0000.dlq"} 0
raftq_queue_paused{queue="q0001"} 0
raftq_queue_paused{queue="q0001.dlq"} 0
# HELP raftq_queue_paused_keys Fairness keys of a queue paused on their own (PauseQueue with a fairness key).
# TYPE raftq_queue_paused_keys gauge
raftq_queue_paused_keys{queue="q0000"} 0
raftq_queue_paused_keys{queue="q0000.dlq"} 0
raftq_queue_paused_keys{queue="q0001"} 2
raftq_queue_paused_keys{queue="q0001.dlq"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "raftq_queue_paused", "raftq_queue_paused_keys"); err != nil {
		t.Error(err)
	}
}
