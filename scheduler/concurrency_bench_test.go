package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// capsBench is one side of BenchmarkConcurrencyCaps: a queue of keys ×
// perKey ready messages, each key both the fairness and the concurrency
// key, one consumer that may hold inFlight leases, and the leases it
// holds, oldest first.
type capsBench struct {
	f      *fsm.FSM
	t      *term
	ps     *passState
	idx    uint64
	token  uint64
	leases []*fsmv1.Ref
	grants int
	spent  time.Duration
}

func newCapsBench(b *testing.B, cfg *fsmv1.QueueConfig, keys, perKey, inFlight int) *capsBench {
	b.Helper()
	cb := &capsBench{f: fsm.New(fsm.Options{Logger: discard})}
	cb.apply(b, &fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: fsm.MaxLogVersion,
		MetaFounders: []*fsmv1.MetaServer{{Id: "n1", Address: "127.0.0.1:7001"}}}}})
	cb.apply(b, &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: "q", Config: cfg}}})
	total := keys * perKey
	for i := 0; i < total; i += 10_000 {
		msgs := make([]*fsmv1.EnqueueMessage, min(10_000, total-i))
		for j := range msgs {
			k := fmt.Sprint("k", (i+j)%keys)
			msgs[j] = &fsmv1.EnqueueMessage{FairnessKey: k, ConcurrencyKey: k}
		}
		cb.apply(b, &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "q", Messages: msgs}}}}})
	}
	s := New(Config{Logger: discard, MaxGrantBatch: 1 << 30}, cb.f.Reader(), nil)
	cb.t = s.newTerm(context.Background(), 1, time.UnixMilli(1_700_000_000_000))
	if err := cb.t.reg.add(&Consumer{id: "c", queue: "q", seq: 1, max: inFlight}); err != nil {
		b.Fatal(err)
	}
	cb.ps = &passState{now: cb.t.anchor, nowMs: cb.t.anchor.UnixMilli(), anchor: cb.t.anchor}
	// Fill the consumer's credit: with a cap of 1 per key every key is
	// then at its cap.
	for len(cb.leases) < inFlight {
		if cb.pass(b, inFlight) == 0 {
			b.Fatal("the fill picked nothing")
		}
	}
	return cb
}

func (cb *capsBench) apply(b *testing.B, cmd *fsmv1.Command) fsm.Result {
	cb.idx++
	cmd.Version = fsm.MaxLogVersion
	res := cb.f.ApplyCommand(cb.idx, cmd)
	if res.Failure() != nil {
		b.Fatal(res.Failure())
	}
	return res
}

// pass picks up to budget messages and applies their grants.
func (cb *capsBench) pass(b *testing.B, budget int) int {
	var n int
	cb.f.Reader().Read(func(v fsm.View) {
		qv, _ := v.Queue("q")
		n = cb.t.selectQueue(v, qv, "q", cb.ps, budget)
	})
	pl := cb.t.pipe
	grants := pl.batch
	for _, g := range grants {
		cb.token++
		g.LeaseToken = cb.token
	}
	if len(grants) > 0 {
		res, err := fsm.As[*fsm.GrantResult](cb.apply(b, &fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: grants}}}), nil)
		if err != nil {
			b.Fatal(err)
		}
		for i, d := range res.Deliveries {
			if res.Items[i] != nil {
				b.Fatalf("grant refused: %v", res.Items[i])
			}
			cb.leases = append(cb.leases, &fsmv1.Ref{Queue: "q", MessageId: d.ID, LeaseToken: d.LeaseToken})
		}
	}
	pl.batch, pl.batchTo = pl.batch[:0], pl.batchTo[:0]
	clear(pl.pending["q"])
	for _, c := range cb.t.reg.queues["q"] {
		c.pending = 0
	}
	return n
}

// round acks the n oldest leases and grants what that frees, timed.
func (cb *capsBench) round(b *testing.B, n int) {
	start := time.Now()
	cb.apply(b, &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: cb.leases[:n]}}})
	cb.leases = cb.leases[n:]
	got := cb.pass(b, n)
	cb.spent += time.Since(start)
	if got != n {
		b.Fatalf("a round granted %d, want %d", got, n)
	}
	cb.grants += got
}

// BenchmarkConcurrencyCaps is the cost of concurrency caps where most
// keys are blocked: 10,000 keys × 100 messages, a consumer holding
// 10,000 leases, so under a cap of 1 per key every key is at its cap and
// each ack frees exactly one. A round acks the oldest 256 leases and
// grants 256 (the pass, the grant and the ack applied to the state); the
// same rounds run, alternating, against the same workload without caps.
// It reports both grant rates and their ratio (the target: caps ≥ 0.8×).
func BenchmarkConcurrencyCaps(b *testing.B) {
	const keys, perKey, inFlight, batch = 10_000, 100, 10_000, 256
	caps := newCapsBench(b, &fsmv1.QueueConfig{ConcurrencyLimit: 1}, keys, perKey, inFlight)
	plain := newCapsBench(b, nil, keys, perKey, inFlight)
	maxRounds := (keys*perKey - inFlight) / batch
	b.ResetTimer()
	rounds := 0
	for b.Loop() {
		if rounds++; rounds > maxRounds {
			b.Fatalf("more than %d rounds: run with -benchtime Nx, N <= %d", maxRounds, maxRounds)
		}
		if rounds%2 == 0 {
			caps.round(b, batch)
			plain.round(b, batch)
		} else {
			plain.round(b, batch)
			caps.round(b, batch)
		}
	}
	capRate := float64(caps.grants) / caps.spent.Seconds()
	plainRate := float64(plain.grants) / plain.spent.Seconds()
	b.ReportMetric(capRate, "capped-grants/s")
	b.ReportMetric(plainRate, "uncapped-grants/s")
	b.ReportMetric(capRate/plainRate, "ratio")
}
