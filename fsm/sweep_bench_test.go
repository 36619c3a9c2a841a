package fsm

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// BenchmarkDueSweep (issue 20, hole 6): the latency of enqueue and ack
// entries while a million delayed messages come due at one instant, under
// log version 12 (one entry sweeps them all) and 13 (at most
// state.SweepBudget per entry, the leader ticking while some are left).
//
// One goroutine applies entries in order, as Raft's FSM goroutine does;
// clients offer one entry every 5 ms (open loop: an entry arrives on time
// whatever the state machine is doing), alternately an Enqueue of one
// message and an Ack of one lease, stamped so the million come due half a
// second into the 4-second run. An entry's latency is from its arrival to
// the end of its apply: the wait behind entries before it and its own
// apply, which is what a client sees beyond the commit. While
// View.SweepPending (from version 13) a Tick is applied 2 ms after the
// previous one applied (the leader keeps one in flight: proposed once the
// last applied, applied a commit later). Reported: p50/p99/max of each kind, the
// longest single apply (the lock hold every reader and the scheduler wait
// behind), and the ticks it took.
func BenchmarkDueSweep(b *testing.B) {
	for _, v := range []uint32{SweepBudgetVersion - 1, SweepBudgetVersion} {
		b.Run(fmt.Sprint("version", v), func(b *testing.B) {
			for range b.N {
				dueSweep(b, v)
			}
		})
	}
}

func dueSweep(b *testing.B, version uint32) {
	const (
		delayed  = 1_000_000
		perEntry = 10_000
		delayMs  = 60_000
		run      = 4 * time.Second
		dueAfter = 500 * time.Millisecond
		every    = 5 * time.Millisecond // 200 client entries a second
		// The leader keeps one Tick in flight: at most one per commit.
		tickEvery = 2 * time.Millisecond
	)
	f := New(Options{})
	var index uint64
	t0 := int64(1_000_000)
	apply := func(nowMs int64, cmd *fsmv1.Command) (Result, time.Duration) {
		index++
		cmd.NowMs, cmd.Version = nowMs, version
		data, err := Encode(cmd)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(Result)
		return res, time.Since(start)
	}
	apply(t0, &fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: version, MetaFounders: foundersFor(version)}}})
	for _, q := range []string{"due", "work"} {
		apply(t0, &fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: q}}})
	}
	payload := make([]byte, 64)
	for range delayed / perEntry {
		msgs := make([]*fsmv1.EnqueueMessage, perEntry)
		for j := range msgs {
			msgs[j] = &fsmv1.EnqueueMessage{Payload: payload, DelayMs: delayMs}
		}
		apply(t0, &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "due", Messages: msgs}}}}})
	}
	// Leases for the acks of the run.
	acks := int(run/every)/2 + 1
	var refs []*fsmv1.Ref
	for len(refs) < acks {
		n := min(acks-len(refs), perEntry)
		msgs := make([]*fsmv1.EnqueueMessage, n)
		for j := range msgs {
			msgs[j] = &fsmv1.EnqueueMessage{Payload: payload}
		}
		res, _ := apply(t0, &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "work", Messages: msgs}}}}})
		ids := res.(*EnqueueResult).Batches[0].IDs
		gs := make([]*fsmv1.Grant, len(ids))
		for j, id := range ids {
			gs[j] = &fsmv1.Grant{Queue: "work", MessageId: id, ConsumerId: "c", DeadlineMs: t0 + 3_600_000, LeaseToken: uint64(len(refs)+j) + 1}
		}
		gr, _ := apply(t0, &fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: gs}}})
		for j, d := range gr.(*GrantResult).Deliveries {
			refs = append(refs, &fsmv1.Ref{Queue: "work", MessageId: d.ID, LeaseToken: gs[j].LeaseToken})
		}
	}

	// The run: arrivals on the client's schedule, applies in order.
	type arrival struct {
		at  time.Time
		ack bool
		cmd *fsmv1.Command
	}
	arrivals := make(chan arrival, int(run/every)+1)
	start := time.Now()
	base := t0 + delayMs - dueAfter.Milliseconds()
	go func() {
		defer close(arrivals)
		for i := 0; ; i++ {
			at := start.Add(time.Duration(i) * every)
			if at.Sub(start) >= run {
				return
			}
			time.Sleep(time.Until(at))
			a := arrival{at: at, ack: i%2 == 1}
			if a.ack {
				a.cmd = &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: []*fsmv1.Ref{refs[i/2]}}}}
			} else {
				a.cmd = &fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: "work", Messages: []*fsmv1.EnqueueMessage{{Payload: payload}}}}}}}
			}
			arrivals <- a
		}
	}()
	var enq, ack []time.Duration
	var longest time.Duration
	ticks := 0
	stamp := func() int64 { return base + time.Since(start).Milliseconds() }
	var lastTick time.Time
	tick := func() {
		pending := false
		f.Reader().Read(func(v View) { pending = v.SweepPending() })
		if pending && time.Since(lastTick) >= tickEvery {
			ticks++
			_, took := apply(stamp(), &fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}})
			longest = max(longest, took)
			lastTick = time.Now() // the next is proposed once this applied, and commits 2 ms later
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for open := true; open; {
		timer.Reset(tickEvery)
		select {
		case a, ok := <-arrivals:
			if open = ok; !ok {
				break
			}
			res, took := apply(stamp(), a.cmd)
			if err := res.Failure(); err != nil {
				b.Fatal(err)
			}
			longest = max(longest, took)
			lat := time.Since(a.at)
			if a.ack {
				ack = append(ack, lat)
			} else {
				enq = append(enq, lat)
			}
		case <-timer.C:
		}
		tick()
	}
	for pending := true; pending; {
		tick()
		f.Reader().Read(func(v View) { pending = v.SweepPending() })
	}
	if qi, _ := f.Reader().GetQueue("due"); qi.Stats.Ready != delayed {
		b.Fatalf("%d of %d delayed messages ready after the run", qi.Stats.Ready, delayed)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	pct := func(xs []time.Duration, p float64) time.Duration {
		slices.Sort(xs)
		return xs[min(len(xs)-1, int(p*float64(len(xs))))]
	}
	b.ReportMetric(ms(pct(enq, 0.50)), "enqueue-p50-ms")
	b.ReportMetric(ms(pct(enq, 0.99)), "enqueue-p99-ms")
	b.ReportMetric(ms(pct(enq, 1)), "enqueue-max-ms")
	b.ReportMetric(ms(pct(ack, 0.50)), "ack-p50-ms")
	b.ReportMetric(ms(pct(ack, 0.99)), "ack-p99-ms")
	b.ReportMetric(ms(pct(ack, 1)), "ack-max-ms")
	b.ReportMetric(ms(longest), "longest-apply-ms")
	b.ReportMetric(float64(ticks), "ticks")
}
