//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// Workload drives producers and consumers through the Go client and the
// public API, recording every call in a Recorder.
type Workload struct {
	c   *Cluster
	cl  *client.Client // enqueues: the client's own retries, dedup ids
	one *client.Client // settles: one attempt each, so every answer is what it says
	rec *Recorder
	log *slog.Logger
	vis time.Duration

	streams  atomic.Int64
	acked    atomic.Int64 // enqueue calls answered ok
	quiet    atomic.Bool  // consumers stop dropping streams
	handlers sync.WaitGroup
}

// NewWorkload prepares a workload over cl (which must not retry acks).
func NewWorkload(c *Cluster, cl *client.Client, rec *Recorder, vis time.Duration, log *slog.Logger) *Workload {
	return &Workload{c: c, cl: cl, one: cl.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1, AttemptTimeout: 3 * time.Second}),
		rec: rec, log: log, vis: vis}
}

// Quiet stops consumers from dropping their streams, so that stretches of
// the run have nothing that may hide a delivery: there the checker can
// hold every counted attempt to a delivery a consumer saw.
func (w *Workload) Quiet() { w.quiet.Store(true) }

// Acked is the number of enqueue calls answered ok so far.
func (w *Workload) Acked() int64 { return w.acked.Load() }

// classify turns a call's error into an outcome: only answers that say
// the broker refused the request are failures; the rest may have applied.
func classify(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.ResourceExhausted, codes.FailedPrecondition:
		return Failed, status.Code(err).String()
	}
	return Unknown, status.Code(err).String()
}

// Produce enqueues until ctx ends: batches of 1–4 messages with unique
// payloads and their own dedup ids; after an unknown outcome it sometimes
// retries the same messages (same dedup ids), as a careful user would.
func (w *Workload) Produce(ctx context.Context, name string, queues []QueueSpec, rng *rand.Rand) {
	defer w.c.guard()
	for seq := 0; ctx.Err() == nil; {
		spec := queues[rng.IntN(len(queues))]
		q := spec.Name
		n := 1
		if rng.IntN(5) == 0 {
			n = 2 + rng.IntN(3)
		}
		var msgs []*raftqv1.EnqueueMessage
		op := EnqueueOp{Producer: name, Queue: q}
		for range n {
			seq++
			p := fmt.Sprintf("%s/%s/%d", name, q, seq)
			m := &raftqv1.EnqueueMessage{Payload: []byte(p), DedupId: client.NewDedupID()}
			if len(spec.Keys) > 0 {
				k := pickKey(spec.Keys, rng)
				m.ConcurrencyKey, m.FairnessKey = k, k
				op.Keys = append(op.Keys, k)
			}
			msgs = append(msgs, m)
			op.Payloads = append(op.Payloads, p)
			op.DedupIDs = append(op.DedupIDs, m.DedupId)
		}
		out := w.enqueue(ctx, op, msgs)
		if out == Unknown && ctx.Err() == nil && rng.IntN(2) == 0 {
			op.Retry = true
			w.enqueue(ctx, op, msgs)
		}
		_ = harness.Sleep(ctx, time.Duration(5+rng.IntN(20))*time.Millisecond)
	}
}

// pickKey draws a message's key in a keyed queue: no key four times in
// ten, else keys[i] with weight 1/2, 1/4, ... along the list, the last
// two sharing the rest equally. The keys capped at 1 go last, so each
// gets a few hundredths of the messages: a cap-1 key serves one message
// at a time, and the consumers' slow behaviours (holding past the lease,
// abandoning) keep it for seconds.
func pickKey(keys []string, rng *rand.Rand) string {
	if rng.IntN(10) < 4 {
		return ""
	}
	for _, k := range keys[:len(keys)-1] {
		if rng.IntN(2) == 0 {
			return k
		}
	}
	return keys[len(keys)-1]
}

func (w *Workload) enqueue(ctx context.Context, op EnqueueOp, msgs []*raftqv1.EnqueueMessage) Outcome {
	op.Start = time.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 8*time.Second)
	ids, err := w.cl.Enqueue(cctx, op.Queue, msgs...)
	cancel()
	op.End = time.Now()
	op.Outcome, _ = classify(err)
	if err != nil {
		op.Err = err.Error()
	} else {
		op.IDs = ids
		w.acked.Add(1)
	}
	w.rec.Enqueue(op)
	return op.Outcome
}

// behaviour is what a consumer does with one delivery.
type behaviour int

const (
	ackFast  behaviour = iota
	nack               // back for redelivery (sometimes straight to the DLQ)
	nackDLQ            // straight to the DLQ
	slowWork           // extend the lease half way, then ack
	holdPast           // hold past the visibility timeout, then ack (usually refused)
	abandon            // never settle: the lease expires
	drainAck           // the drain: ack at once
)

// Consumer is one consumer of one queue on raw Lease streams, which give
// the token and attempt of every delivery. It follows redirects to the
// leader and reconnects after any stream end.
type Consumer struct {
	w           *Workload
	name, queue string
	maxInFlight int32
	vis         time.Duration
	drain       bool // ack everything, never drop
	rng         *rand.Rand
	hint        string
}

// NewConsumer returns a chaos consumer (drain: a well-behaved one that
// acks everything).
func (w *Workload) NewConsumer(name, queue string, drain bool, seed uint64) *Consumer {
	c := &Consumer{w: w, name: name, queue: queue, maxInFlight: 16, vis: w.vis, drain: drain,
		rng: rand.New(rand.NewPCG(seed, 0xc0ffee))}
	if drain {
		c.maxInFlight, c.vis = 64, 4*w.vis
	}
	return c
}

// Run consumes until ctx ends; handlers it started may still be
// settling (Workload.Wait waits for them).
func (co *Consumer) Run(ctx context.Context) {
	defer co.w.c.guard()
	seeds := co.w.c.Seeds()
	for failures := 0; ctx.Err() == nil; {
		addr := co.hint
		if addr == "" {
			addr = seeds[co.rng.IntN(len(seeds))]
		}
		err := co.stream(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if leader, ok := client.NotLeader(err); ok && leader != "" && leader != addr && failures < 3 {
			co.hint = leader
			failures++
			continue
		}
		co.hint = ""
		failures = 0
		co.w.log.Debug("lease stream ended", "consumer", co.name, "addr", addr, "err", err)
		_ = harness.Sleep(ctx, time.Duration(100+co.rng.IntN(200))*time.Millisecond)
	}
}

// stream runs one Lease stream until it ends, or until the consumer drops
// it on purpose (then nil).
func (co *Consumer) stream(ctx context.Context, addr string) error {
	cc, err := co.w.c.Conn(addr)
	if err != nil {
		return err
	}
	sid := co.w.streams.Add(1)
	node := co.w.c.nodeAt(addr) // whose clock the deadlines are on
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := raftqv1.NewBrokerClient(cc).Lease(sctx, &raftqv1.LeaseRequest{
		Queue: co.queue, ConsumerName: co.name, MaxInFlight: co.maxInFlight, VisibilityTimeoutMs: co.vis.Milliseconds(),
	})
	if err != nil {
		return err
	}
	// dropped: we closed the stream, which releases its leases, so its
	// handlers give their deliveries up. A stream the server ends (a
	// leader change) leaves leases valid: handlers go on settling them.
	dropped := &atomic.Bool{}
	drop := func() {
		dropped.Store(true)
		co.w.rec.Drop(StreamDrop{Consumer: co.name, Stream: sid, Queue: co.queue, At: time.Now()})
		cancel()
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			if ctx.Err() != nil {
				drop() // the workload stopped: the close is ours
			} else {
				co.w.rec.End(StreamEnd{Consumer: co.name, Stream: sid, Queue: co.queue, At: time.Now(), Code: status.Code(err).String()})
			}
			return err
		}
		now := time.Now()
		for _, d := range resp.GetMessages() {
			co.w.rec.Delivery(Delivery{Consumer: co.name, Stream: sid, Queue: d.GetQueue(), MessageID: d.GetId(),
				Payload: string(d.GetPayload()), Token: d.GetLeaseToken(), Attempt: d.GetAttempt(),
				DeadlineMs: d.GetLeaseDeadlineMs(), VisibilityMs: co.vis.Milliseconds(), Recv: now, Node: node})
		}
		for _, d := range resp.GetMessages() {
			b := co.choose()
			co.w.handlers.Add(1)
			go func() { defer co.w.handlers.Done(); co.handle(ctx, d, b, dropped) }()
		}
		if !co.drain && co.rng.IntN(100) < 2 && !co.w.quiet.Load() {
			drop()
			return nil
		}
	}
}

func (co *Consumer) choose() behaviour {
	if co.drain {
		return drainAck
	}
	switch r := co.rng.IntN(100); {
	case r < 70:
		return ackFast
	case r < 80:
		return nack
	case r < 83:
		return nackDLQ
	case r < 89:
		return slowWork
	case r < 95:
		return holdPast
	default:
		return abandon
	}
}

// handle works on one delivery. A handler whose stream was dropped gives
// its delivery up (the broker released it).
func (co *Consumer) handle(ctx context.Context, d *raftqv1.Delivery, b behaviour, dropped *atomic.Bool) {
	defer co.w.c.guard()
	ref := &raftqv1.LeaseRef{MessageId: d.GetId(), LeaseToken: d.GetLeaseToken()}
	live := func() bool { return ctx.Err() == nil && !dropped.Load() }
	switch b {
	case drainAck:
		co.settle(ctx, Ack, ref, false)
	case ackFast:
		if harness.Sleep(ctx, time.Duration(co.randN(10))*time.Millisecond) == nil && live() {
			co.settle(ctx, Ack, ref, false)
		}
	case nack, nackDLQ:
		if live() {
			co.settle(ctx, Nack, ref, b == nackDLQ)
		}
	case slowWork:
		if harness.Sleep(ctx, co.vis/2) == nil && live() && co.settle(ctx, Extend, ref, false) == OK &&
			harness.Sleep(ctx, co.vis*3/10) == nil && live() {
			co.settle(ctx, Ack, ref, false)
		}
	case holdPast:
		if harness.Sleep(ctx, co.vis+time.Duration(300+co.randN(500))*time.Millisecond) == nil && live() {
			co.settle(ctx, Ack, ref, false)
		}
	case abandon:
	}
}

// randN is rng.IntN for handler goroutines (the consumer's seeded rng
// belongs to its receive loop). math/rand/v2's top-level functions are
// safe for concurrent use, so no lock is needed.
func (co *Consumer) randN(n int) int { return rand.IntN(n) }

// settle acks, nacks or extends one lease, one attempt at a time so every
// answer is recorded as given; an attempt with no answer is tried again
// (up to three times) while the lease may still be valid.
func (co *Consumer) settle(ctx context.Context, kind SettleKind, ref *raftqv1.LeaseRef, deadLetter bool) Outcome {
	base := context.WithoutCancel(ctx) // settling outlives the workload's stop
	var out Outcome
	for attempt := 0; attempt < 3; attempt++ {
		s := Settle{Kind: kind, Consumer: co.name, Queue: co.queue, MessageID: ref.MessageId, Token: ref.LeaseToken, DeadLetter: deadLetter, Start: time.Now()}
		cctx, cancel := context.WithTimeout(base, 4*time.Second)
		var res []*raftqv1.ItemResult
		var err error
		switch kind {
		case Ack:
			res, err = co.w.one.Ack(cctx, co.queue, ref)
		case Nack:
			res, err = co.w.one.Nack(cctx, co.queue, &raftqv1.NackItem{MessageId: ref.MessageId, LeaseToken: ref.LeaseToken,
				DelayMs: int64(co.randN(100)), DeadLetter: deadLetter, Reason: "chaos"})
		case Extend:
			var resp *raftqv1.ExtendLeaseResponse
			resp, err = co.w.one.ExtendLease(cctx, co.queue, co.vis, ref)
			res = resp.GetResults()
			s.VisibilityMs = co.vis.Milliseconds()
			if err == nil && len(resp.GetDeadlinesMs()) > 0 {
				s.NewDeadlineMs = resp.GetDeadlinesMs()[0]
			}
		}
		cancel()
		s.End = time.Now()
		switch {
		case err != nil:
			s.Outcome, s.Code = classify(err)
			if s.Outcome == Failed { // the whole call was refused
				break
			}
			s.Outcome = Unknown
		case len(res) != 1:
			s.Outcome, s.Code = Unknown, fmt.Sprintf("%d results", len(res))
		default:
			s.Outcome, s.Code = OK, ""
			if ierr := client.ItemError(res[0]); ierr != nil {
				s.Outcome, s.Code = Failed, status.Code(ierr).String()
			}
		}
		if s.Outcome != OK {
			s.NewDeadlineMs = 0
		}
		co.w.rec.Settle(s)
		out = s.Outcome
		if out != Unknown || errors.Is(err, client.ErrClosed) {
			return out
		}
		_ = harness.Sleep(base, 200*time.Millisecond)
	}
	return out
}

// Pauses pauses one key of the keyed queue q at a time until ctx ends:
// a seeded key for a seeded 3–8 s, then waits out the pause and a few
// seconds more (where the key must flow again) before the next. Each
// call is one attempt and recorded as answered; a pause never overlaps
// another of the workload's (an unanswered one may apply late, by an
// election at most).
func (w *Workload) Pauses(ctx context.Context, q QueueSpec, rng *rand.Rand) {
	defer w.c.guard()
	for ctx.Err() == nil {
		if harness.Sleep(ctx, time.Duration(1000+rng.IntN(2000))*time.Millisecond) != nil {
			return
		}
		key := q.Keys[rng.IntN(len(q.Keys))]
		d := time.Duration(3000+rng.IntN(5000)) * time.Millisecond
		p := PauseOp{Queue: q.Name, Key: key, DurationMs: d.Milliseconds(), Start: time.Now()}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Second)
		info, err := w.one.PauseQueue(cctx, q.Name, key, d)
		cancel()
		p.End = time.Now()
		p.Outcome, p.Code = classify(err)
		for _, pk := range info.GetPausedKeys() {
			if pk.GetKey() == key {
				p.UntilMs = pk.GetUntilMs()
			}
		}
		w.rec.Pause(p)
		if harness.Sleep(ctx, time.Until(p.Start.Add(d+3*time.Second))) != nil {
			return
		}
	}
}

// Lookups watches who leads until ctx ends; after each change of leader
// it asks GetMessage (through the client, so the new leader answers) of
// a few messages the old leader leased in the last 20 s, and records what
// the story lists (the checker wants the old leader's lease in it). A
// message no longer in its queue may be in its dead-letter queue's
// recent acks: then the DLQ is asked too.
func (w *Workload) Lookups(ctx context.Context, queues []QueueSpec, rng *rand.Rand) {
	defer w.c.guard()
	dlq := map[string]string{}
	for _, q := range queues {
		dlq[q.Name] = q.DeadLetter
	}
	prev := ""
	for harness.Sleep(ctx, 2*time.Second) == nil {
		l, err := w.c.Leader(ctx)
		if err != nil {
			continue
		}
		if prev != "" && l.ID != prev {
			ds := w.rec.RecentDeliveries(prev, time.Now().Add(-20*time.Second), 16)
			rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
			for _, d := range ds[:min(4, len(ds))] {
				w.lookup(ctx, d, prev, l.ID, dlq[d.Queue])
			}
		}
		prev = l.ID
	}
}

func (w *Workload) lookup(ctx context.Context, d Delivery, oldLeader, newLeader, dlq string) {
	lk := LeaseLookup{Queue: d.Queue, MessageID: d.MessageID, Token: d.Token, Attempt: d.Attempt, Consumer: d.Consumer,
		OldLeader: oldLeader, NewLeader: newLeader, At: time.Now(), AskedQueue: d.Queue}
	ask := func(q string) (*raftqv1.GetMessageResponse, error) {
		cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		return w.one.GetMessage(cctx, q, d.MessageID)
	}
	resp, err := ask(d.Queue)
	if status.Code(err) == codes.NotFound && dlq != "" {
		lk.AskedQueue = dlq
		resp, err = ask(dlq)
	}
	lk.Outcome, lk.Code = classify(err)
	if err == nil {
		lk.State = resp.GetState()
		for _, a := range resp.GetMessage().GetHistory() {
			lk.Attempts = append(lk.Attempts, LookupAttempt{Attempt: a.GetAttempt(), Consumer: a.GetConsumer(), Outcome: a.GetOutcome()})
		}
		for _, e := range resp.GetEvents() {
			if e.GetKind() == "leased" {
				lk.Leased = append(lk.Leased, e.GetDetail())
			}
		}
		lk.Events = len(resp.GetEvents())
	}
	w.rec.Lookup(lk)
}

// Wait waits for every handler to finish settling.
func (w *Workload) Wait() { w.handlers.Wait() }
