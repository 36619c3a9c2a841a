package fsm

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// memGen drives an FSM with what issue 24's memory cuts share between
// messages and between a state and its frozen copies: headers partly in
// common with the previous message of a fairness key, throttle keys
// giving a key one to three groups (a sole group is the key's ids
// tree), concurrency keys, leases, delays and dead-letters with stories
// (a message's more), dedup ids; mixed with the property test's
// generator. It is the generator of testdata/mem-generator.go.txt, on
// this build's API. content records what every enqueued message must
// read back as.
type memGen struct {
	t       *testing.T
	r       *rand.Rand
	g       *cmdGen
	index   uint64
	term    uint64
	content map[uint64]*fsmv1.EnqueueMessage
	queues  []string
}

func newMemGen(t *testing.T, f *FSM, seed uint64) *memGen {
	queues := []string{"a", "b", "shared", "a.dlq"}
	return &memGen{
		t: t, r: rand.New(rand.NewPCG(seed, 2026)), term: 1,
		g:       &cmdGen{r: rand.New(rand.NewPCG(seed, 7)), f: f, now: 1_000_000, queues: queues},
		content: map[uint64]*fsmv1.EnqueueMessage{},
		queues:  queues,
	}
}

func (m *memGen) pick(xs ...string) string { return xs[m.r.IntN(len(xs))] }

// entry encodes cmd as the next log entry.
func (m *memGen) entry(cmd *fsmv1.Command) *raft.Log {
	m.t.Helper()
	m.index++
	cmd.Version = MaxLogVersion
	if cmd.NowMs == 0 {
		cmd.NowMs = m.g.now
	}
	data, err := Encode(cmd)
	if err != nil {
		m.t.Fatal(err)
	}
	return &raft.Log{Index: m.index, Term: m.term, Type: raft.LogCommand, Data: data}
}

func (m *memGen) config(q string) *fsmv1.QueueConfig {
	cfg := &fsmv1.QueueConfig{
		MaxDeliveries:       int32(2 + m.r.IntN(2)),
		VisibilityTimeoutMs: int64(100 + m.r.IntN(300)),
		DedupWindowMs:       int64(200 + m.r.IntN(800)),
		Throttles:           map[string]*fsmv1.ThrottleRule{"t0": {RatePerSec: 20, Burst: 2}, "t1": {RatePerSec: 5, Burst: 1}},
		ConcurrencyLimits:   map[string]int32{"c0": 1, "c1": 2},
	}
	if q != "a.dlq" && q != "shared" {
		cfg.DeadLetterQueue = "a.dlq"
	}
	if m.r.IntN(2) == 0 {
		cfg.MessageTtlMs = int64(500 + m.r.IntN(2000))
	}
	if m.r.IntN(2) == 0 {
		cfg.Retry = &fsmv1.RetryPolicy{InitialDelayMs: 10, MaxDelayMs: 200, Multiplier: 2}
	}
	return cfg
}

func (m *memGen) message() *fsmv1.EnqueueMessage {
	r := m.r
	em := &fsmv1.EnqueueMessage{
		Payload:     []byte(fmt.Sprint("p", r.IntN(1000))),
		Priority:    int32(r.IntN(3)),
		FairnessKey: m.pick("", "k0", "k1", "k2"),
		Weight:      uint32(r.IntN(3)),
	}
	switch r.IntN(7) {
	case 0: // none
	case 1:
		em.Headers = map[string]string{}
	default:
		h := map[string]string{}
		if r.IntN(4) != 0 {
			h["content-type"] = m.pick("json", "proto")
		}
		if r.IntN(3) != 0 {
			h["trace"] = fmt.Sprint(r.Uint32())
		}
		if r.IntN(3) == 0 {
			h["tenant"] = m.pick("x", "y")
		}
		// Headers of one length, values of one length: a message's common
		// headers can differ from the previous one's and be as long.
		for _, k := range []string{"ha", "hb"} {
			if r.IntN(2) == 0 {
				h[k] = m.pick("0", "1")
			}
		}
		if r.IntN(10) == 0 {
			h[""] = m.pick("", "e")
		}
		if r.IntN(12) == 0 {
			h["zz"] = strings.Repeat(m.pick("v", "w"), 150) // past splitHeaders' stack buffers
		}
		em.Headers = h
	}
	switch r.IntN(6) {
	case 0:
		em.ThrottleKeys = []string{"t0"}
	case 1:
		em.ThrottleKeys = []string{"t1"}
	case 2:
		em.ThrottleKeys = []string{"t0", "t1"}
	}
	if r.IntN(4) == 0 {
		em.ConcurrencyKey = m.pick("c0", "c1")
	}
	if r.IntN(5) == 0 {
		em.DelayMs = int64(1 + r.IntN(300))
	}
	if r.IntN(6) == 0 {
		em.TtlMs = int64(100 + r.IntN(600))
	}
	if r.IntN(3) == 0 {
		em.DedupId = fmt.Sprint("dd", r.IntN(60))
	}
	return em
}

// step applies one entry (or a delete and its queue's creation again) to
// f through apply, which returns f's result.
func (m *memGen) step(apply func(*raft.Log) Result) {
	m.t.Helper()
	r, g := m.r, m.g
	g.now += int64(r.IntN(20))
	if r.IntN(40) == 0 {
		m.term++
	}
	run := func(cmd *fsmv1.Command) Result {
		res := apply(m.entry(cmd))
		g.observe(res)
		return res
	}
	switch n := r.IntN(100); {
	case n < 30:
		var batches []*fsmv1.EnqueueBatch
		for range 1 + r.IntN(2) {
			var msgs []*fsmv1.EnqueueMessage
			for range 1 + r.IntN(6) {
				msgs = append(msgs, m.message())
			}
			batches = append(batches, &fsmv1.EnqueueBatch{Queue: m.pick("a", "b", "a", "shared"), Messages: msgs})
		}
		res, _ := run(&fsmv1.Command{Op: &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: batches}}}).(*EnqueueResult)
		for i, b := range res.Batches {
			if b.Err == nil {
				for j, id := range b.IDs {
					if _, seen := m.content[id]; !seen && id>>20 == m.index { // not a duplicate's id
						m.content[id] = batches[i].Messages[j]
					}
				}
			}
		}
	case n < 45:
		run(&fsmv1.Command{Op: &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: g.grants(m.pick("a", "b", "shared", "a.dlq"))}}})
	case n < 50 && len(g.leases) > 0:
		i := r.IntN(len(g.leases))
		d := g.leases[i]
		g.leases = append(g.leases[:i], g.leases[i+1:]...)
		run(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: ref(d), DeadLetter: r.IntN(2) == 0, Reason: m.pick("", "bad", "nack"), RetryDelayMs: int64(r.IntN(3) * 40)}}}}})
	case n < 53:
		run(&fsmv1.Command{Op: &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: m.pick("a", "b"), FairnessKey: m.pick("k0", "k1", ""), DurationMs: int64(r.IntN(500))}}})
	case n < 55:
		run(&fsmv1.Command{Op: &fsmv1.Command_ResumeQueue{ResumeQueue: &fsmv1.ResumeQueue{Name: m.pick("a", "b"), FairnessKey: m.pick("k0", "k1", "")}}})
	case n < 57:
		q := m.pick("a", "b", "shared")
		run(&fsmv1.Command{Op: &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: q, Config: m.config(q), Mask: []string{"throttles", "concurrency_limits", "max_deliveries"}}}})
	case n < 58:
		q := m.pick("a", "b")
		if run(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: q}}}).Failure() == nil {
			run(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: q, Config: m.config(q)}}})
		}
	case n < 61:
		run(&fsmv1.Command{Op: &fsmv1.Command_Redrive{Redrive: &fsmv1.Redrive{Queue: m.pick("a", "b"), Limit: int64(r.IntN(6))}}})
	case n < 66:
		g.now += int64(r.IntN(700)) // leases, delays, TTLs and dedup windows come due
		run(&fsmv1.Command{Op: &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}})
	default:
		cmd := g.next()
		switch op := cmd.Op.(type) {
		case *fsmv1.Command_SetClusterSettings:
			mq := int64(1 << 30) // no limit that refuses most enqueues
			op.SetClusterSettings.MaxQueuedBytes, op.SetClusterSettings.MaxQueues = &mq, nil
		case *fsmv1.Command_CreateQueue:
			op.CreateQueue.Config = m.config(op.CreateQueue.Name)
		case *fsmv1.Command_Checkpoint:
			// The FSM keeps two checkpoints: the test's own must stay.
			cmd.Op = &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}
		}
		if run(cmd).Failure() == nil {
			if op, ok := cmd.Op.(*fsmv1.Command_DeleteQueue); ok && op.DeleteQueue != nil {
				run(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: op.DeleteQueue.Name, Config: m.config(op.DeleteQueue.Name)}}})
			}
		}
	}
}

// setup creates the queues.
func (m *memGen) setup(apply func(*raft.Log) Result) {
	m.t.Helper()
	if res := apply(m.entry(&fsmv1.Command{Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: MaxLogVersion, MetaFounders: testFounders}}})); res.Failure() != nil {
		m.t.Fatal(res.Failure())
	}
	for _, q := range []string{"a.dlq", "shared", "a", "b"} {
		if res := apply(m.entry(&fsmv1.Command{Op: &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: q, Config: m.config(q)}}})); res.Failure() != nil {
			m.t.Fatal(q, res.Failure())
		}
	}
}

// checkContent fails unless every message f holds reads back as it was
// enqueued: payload, headers, keys and priority, whatever was shared with
// whom and whatever happened to it since. It returns how many it checked
// and how many of them carried headers.
func (m *memGen) checkContent(f *FSM, what string) (checked, withHeaders int) {
	m.t.Helper()
	var failure string
	f.Reader().Read(func(v state.View) {
		for _, q := range v.QueueNames() {
			for id, want := range m.content {
				info, err := v.Message(q, id)
				if err != nil || info.State == "acked" || info.Delivery.Queue != q {
					continue
				}
				d := info.Delivery
				switch {
				case !bytes.Equal(d.Payload, want.Payload):
					failure = fmt.Sprintf("payload %q, enqueued %q", d.Payload, want.Payload)
				case !maps.Equal(d.Headers, want.Headers):
					failure = fmt.Sprintf("headers %v, enqueued %v", d.Headers, want.Headers)
				case d.FairnessKey != want.FairnessKey || !slices.Equal(d.ThrottleKeys, want.ThrottleKeys) || d.Priority != want.Priority:
					failure = fmt.Sprintf("key %q throttle keys %v priority %d, enqueued %q %v %d", d.FairnessKey, d.ThrottleKeys, d.Priority, want.FairnessKey, want.ThrottleKeys, want.Priority)
				}
				if failure != "" {
					failure = fmt.Sprintf("%s: message %d of %s: %s", what, id, q, failure)
					return
				}
				checked++
				if len(want.Headers) > 0 {
					withHeaders++
				}
			}
		}
	})
	if failure != "" {
		m.t.Fatal(failure)
	}
	return checked, withHeaders
}

// TestFrozenCopiesUnderHeavyApply: issue 24's memory cuts share a
// message's keys and common headers with other messages, a key's ids
// tree with its first throttle group and a message's more with its
// copies; none of it may let a change leak. Each round freezes the live
// FSM (a snapshot, a Checkpoint entry's copy) and, while goroutines write
// that snapshot and take digests without the lock, applies many more
// entries to it; then the snapshot must be byte for byte the state of
// a model replica that applied only the entries up to the freeze (in
// batches, and restored from its own snapshot now and then, so its
// sharing differs), the checkpoint's digest the model's at that index,
// every message of the snapshot, the model and the live state must read
// back as it was enqueued, and the counter audit's copies taken at the
// freeze must recount to their counters. Under -race this also fails if a frozen
// copy shares memory Apply writes.
func TestFrozenCopiesUnderHeavyApply(t *testing.T) {
	live, model := New(Options{}), New(Options{})
	gen := newMemGen(t, live, 24)
	var lag []*raft.Log // entries the model has not applied yet
	apply := func(l *raft.Log) Result {
		lag = append(lag, l)
		res := live.Apply(l).(Result)
		if err := live.Integrity().Verify(); err != nil {
			t.Fatalf("Verify after entry %d: %v", l.Index, err)
		}
		return res
	}
	catchUp := func() {
		model.ApplyBatch(lag)
		lag = nil
	}
	gen.setup(apply)
	var checked, withHeaders int
	for round := range 10 {
		for range 120 {
			gen.step(apply)
		}
		// The point in time: a checkpoint entry freezes one copy, the
		// snapshot another.
		apply(gen.entry(&fsmv1.Command{Op: &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}}))
		at := gen.index
		catchUp()
		if round%3 == 2 {
			restored := New(Options{})
			if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, model)))); err != nil {
				t.Fatal(err)
			}
			model = restored
		}
		want, wantDigest := snapshotBytes(t, model), digestOf(t, model)
		snap, err := live.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		// The leader's counter audit copies trees too, and recounts
		// them off the lock.
		audits := live.Integrity().AuditCopies("", 100)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		sink := &memSink{}
		var persistErr error
		var drift []string
		wg.Add(3)
		go func() {
			defer wg.Done()
			persistErr = snap.Persist(sink)
		}()
		go func() {
			defer wg.Done()
			for _, c := range audits {
				if have, want := c.Recount(); !reflect.DeepEqual(have, want) {
					drift = append(drift, fmt.Sprintf("%s: counters %+v, its trees %+v", c.Queue, have, want))
				}
			}
		}()
		var digestErr error
		go func() {
			// Digests freeze under the lock and stream without it, as
			// the snapshot's writer does.
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := live.Integrity().Digest(); err != nil {
					digestErr = err
					return
				}
				for _, q := range gen.queues {
					_, _ = live.Reader().Peek(q, 50, false)
				}
			}
		}()
		for range 120 {
			gen.step(apply)
		}
		close(stop)
		wg.Wait()
		if persistErr != nil || digestErr != nil {
			t.Fatal(persistErr, digestErr)
		}
		if len(audits) < 4 || len(drift) > 0 {
			t.Fatalf("round %d: %d audit copies at %d, recounted while applying: %v", round, len(audits), at, drift)
		}
		if got := sink.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("round %d: the snapshot frozen at %d and written during 120 more entries (%d bytes) is not the model's state at %d (%d bytes)", round, at, len(got), at, len(want))
		}
		if got, err := live.Integrity().DigestAt(at); err != nil || got != wantDigest {
			t.Fatalf("round %d: checkpoint at %d digests %s (%v), the model %s", round, at, got, err, wantDigest)
		}
		frozen := New(Options{})
		if err := frozen.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
			t.Fatal(err)
		}
		gen.checkContent(frozen, fmt.Sprintf("round %d, snapshot at %d", round, at))
		gen.checkContent(model, fmt.Sprintf("round %d, model at %d", round, at))
		c, h := gen.checkContent(live, fmt.Sprintf("round %d, live at %d", round, gen.index))
		checked, withHeaders = checked+c, withHeaders+h
	}
	catchUp()
	if a, b := digestOf(t, live), digestOf(t, model); a != b {
		t.Fatalf("live %s, model %s at the end", a, b)
	}
	if checked < 1000 || withHeaders < checked/2 {
		t.Fatalf("%d messages checked, %d of them with headers: the generator no longer reaches the shared parts", checked, withHeaders)
	}
	t.Logf("%d messages checked, %d of them with headers", checked, withHeaders)
}
