//go:build raftqfault

package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport/broker"
)

// waitClusterVersion waits until every node applies at least version v.
func waitClusterVersion(t *testing.T, c *inprocCluster, v uint32) {
	t.Helper()
	waitUntil(t, 20*time.Second, "the cluster version", func() error {
		for _, n := range c.nodes {
			if got := n.state.ClusterVersion(); got < v {
				return fmt.Errorf("%s at cluster version %d, want %d", n.id, got, v)
			}
		}
		return nil
	})
}

// TestCounterAuditRepairsDrift: a counter corrupted on purpose on the
// leader is found by the audit within one rotation over the queues,
// repaired on every replica by a recount (a warning with before and
// after, and raftq_counter_repairs_total on the node it changed), and the
// replicas still agree.
func TestCounterAuditRepairsDrift(t *testing.T) {
	const budget = 2
	logs := &logBuffer{}
	c := startInproc(t, inprocOpts{nodes: 3, audit: broker.AuditConfig{Interval: 50 * time.Millisecond, Budget: budget}, logs: logs})
	waitClusterVersion(t, c, fsm.RecountVersion)
	l := c.leader()
	for _, q := range []string{"a", "b", "c"} {
		mustCreate(t, l, q, nil)
	}
	ctx := tctx(t, 10*time.Second)
	if _, err := l.broker.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "b", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}, {Payload: []byte("y")}}}); err != nil {
		t.Fatal(err)
	}
	c.synced()
	queues := len(l.state.ListQueues("")) // a, b, c and their DLQs

	before := l.b.AuditedQueues()
	if err := l.state.InjectCounterFault("b", "ready", 5); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "the audit to repair the counter", func() error { return l.state.Verify() })
	// The audit recounts at most budget queues a tick: the drift was found
	// within one rotation (plus the tick that was under way).
	if audited := l.b.AuditedQueues() - before; audited > uint64(queues+budget) {
		t.Errorf("the repair came after %d queues were audited; one rotation is %d", audited, queues)
	}
	c.digests() // replicas agree, and followers (whose counters were right) too
	for _, n := range c.nodes {
		if err := n.state.Verify(); err != nil {
			t.Errorf("%s: %v", n.id, err)
		}
		want := 0.0
		if n == l {
			want = 1
		}
		got, _ := sample(scrapeFams(t, n), "raftq_counter_repairs_total", "queue", "b")
		if got != want {
			t.Errorf("%s: raftq_counter_repairs_total{queue=b} = %v, want %v", n.id, got, want)
		}
	}
	text := logs.String()
	for _, want := range []string{"counter audit: a queue's counters disagree", "recomputed them", "queue=b", `before="ready=7`, `after="ready=2`} {
		if !strings.Contains(text, want) {
			t.Errorf("logs lack %q:\n%s", want, text)
		}
	}
}
