package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

func TestClosedConsumerStopsAndLeasesReturn(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		a := e.register("q", 5)
		e.enqueueN("q", 8, nil)
		got := e.drain(a)
		if len(got) != 5 {
			t.Fatalf("a got %d, want 5", len(got))
		}
		a.Close()
		a.Close() // idempotent
		select {
		case <-a.Done():
		default:
			t.Fatal("Done not closed after Close")
		}
		if !errors.Is(a.Err(), ErrClosed) {
			t.Fatalf("Err = %v", a.Err())
		}
		e.idle()
		if st := e.info("q").Stats; st.Ready != 8 || st.InFlight != 0 {
			t.Fatalf("after close: %+v", st)
		}
		if e.s.Consumers("q") != 0 {
			t.Fatal("consumer still registered")
		}
		e.enqueueN("q", 2, nil)
		e.expectNone(a)
		b := e.register("q", 100)
		got = e.drain(b)
		if len(got) != 10 {
			t.Fatalf("b got %d, want 10", len(got))
		}
		for _, d := range got[:5] {
			if d.Attempt != 2 { // a release on stream close counts as a delivery
				t.Fatalf("released message %d attempt %d, want 2", d.ID, d.Attempt)
			}
		}
	})
}

// TestRollbackWhenConsumerGone holds a grant uncommitted while its consumer
// closes without a release (the ReleaseConsumer proposal is refused, as by
// a leader losing its term): the committed lease cannot be pushed, so it is
// rolled back and the attempt does not count. Close waits for the grant's
// outcome and proposes the rollback itself, ahead of its release (see
// TestCloseRacingGrantCountsNoAttempt for the release applied).
func TestRollbackWhenConsumerGone(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		entered, release := e.p.hold(isOp("grant"))
		a := e.register("q", 10)
		ids := e.enqueueN("q", 1, nil)
		<-entered
		e.p.setHook(func(ctx context.Context, cmd *fsmv1.Command) error {
			if _, ok := cmd.Op.(*fsmv1.Command_ReleaseConsumer); ok {
				return errInjected
			}
			return nil
		})
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			a.Close() // waits for the held grant's outcome
		}()
		e.idle()
		select {
		case <-closed:
			t.Fatal("Close returned before the grant to its consumer was handled")
		default:
		}
		close(release)
		<-closed
		e.p.setHook(nil)
		e.idle()
		if e.p.proposed("rollback") != 1 {
			t.Fatalf("rollbacks proposed: %d", e.p.proposed("rollback"))
		}
		if a.Buffered() != 0 {
			t.Fatal("delivery pushed to a closed consumer")
		}
		peek, err := e.f.Reader().Peek("q", 10, false)
		if err != nil || len(peek) != 1 || peek[0].ID != ids[0] || peek[0].Attempt != 0 {
			t.Fatalf("peek %v %v", peek, err)
		}
		b := e.register("q", 10)
		if d := e.recv(b); d.ID != ids[0] || d.Attempt != 1 {
			t.Fatalf("redelivery %+v", d)
		}
	})
}

// TestCloseRacingGrantCountsNoAttempt: a consumer closes while a grant to
// it is proposed but not applied. Raft applies the ReleaseConsumer after
// the grant, so the release counts an attempt for a message that was never
// pushed to anyone; with max_deliveries=1 it is dead-lettered unseen.
func TestCloseRacingGrantCountsNoAttempt(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", &fsmv1.QueueConfig{MaxDeliveries: 1})
		entered, release := e.p.hold(isOp("grant"))
		a := e.register("q", 10)
		ids := e.enqueueN("q", 1, nil)
		<-entered
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			a.Close() // its release waits behind the grant, as in Raft
		}()
		e.idle()
		close(release)
		<-closed
		e.idle()
		if a.Buffered() != 0 {
			t.Fatal("delivery pushed to a closed consumer")
		}
		if st := e.info("q").Stats; st.DeadLettered != 0 || st.Ready != 1 {
			t.Fatalf("a message never pushed was counted: stats %+v", st)
		}
		peek, err := e.f.Reader().Peek("q", 10, false)
		if err != nil || len(peek) != 1 || peek[0].ID != ids[0] || peek[0].Attempt != 0 {
			t.Fatalf("peek %v %v", peek, err)
		}
	})
}

// TestLapsedBufferedDeliveryReturnsUncounted (issue 20, hole 3): a
// delivery whose lease lapses while it waits in the buffer (the stream was
// slow to take it) is never handed to the stream: it was never sent, so
// it is taken out and rolled back uncounted, then granted again, and the
// stream gets it under a new lease at its first attempt. One rollback and
// one grant per lapse, and no expiry: no spin.
func TestLapsedBufferedDeliveryReturnsUncounted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LeaseGrace = -1 })
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000, MaxDeliveries: 1})
		c := e.register("q", 1)
		ids := e.enqueueN("q", 1, nil)
		e.idle()
		if c.Buffered() != 1 {
			t.Fatal("no delivery buffered")
		}
		var stale uint64
		e.f.Reader().Read(func(v fsm.View) { _, stale, _ = v.Lease("q", ids[0]) })
		e.advance(time.Second) // the buffered lease lapses
		st := e.info("q").Stats
		if grants, rollbacks := e.p.proposed("grant"), e.p.proposed("rollback"); grants != 2 || rollbacks != 1 || e.p.proposed("expire") != 0 || st.ExpiredTotal != 0 || st.DeadLettered != 0 {
			t.Fatalf("stats %+v, grants %d, rollbacks %d, expiries %d; want the lapsed lease rolled back and granted again", st, grants, rollbacks, e.p.proposed("expire"))
		}
		d := e.recv(c)
		if d.ID != ids[0] || d.Attempt != 1 || d.LeaseToken == stale {
			t.Fatalf("delivery %+v, want message %d at attempt 1 under a new token (not %d)", d, ids[0], stale)
		}
		e.expectNone(c)
	})
}

// TestTakeDropsLapsedDelivery: a stream that takes its buffer after a
// delivery's deadline (before the sweeper got to it) is not handed it;
// it is rolled back uncounted just the same and comes again.
func TestTakeDropsLapsedDelivery(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LeaseGrace = time.Hour }) // the sweeper expires nothing
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
		c := e.register("q", 1)
		ids := e.enqueueN("q", 1, nil)
		e.idle()
		time.Sleep(time.Second) // the deadline passes; the stream has not taken it
		if d, ok := c.TakeOne(); ok {
			t.Fatalf("handed a delivery whose lease lapsed: %+v", d)
		}
		e.idle()
		if e.p.proposed("rollback") != 1 {
			t.Fatalf("rollbacks %d, want 1", e.p.proposed("rollback"))
		}
		if d := e.recv(c); d.ID != ids[0] || d.Attempt != 1 {
			t.Fatalf("delivery %+v, want message %d at attempt 1", d, ids[0])
		}
	})
}

func TestRegisterErrors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		if _, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "nope"}); !errors.Is(err, fsm.ErrQueueNotFound) {
			t.Fatalf("unknown queue: %v", err)
		}
		if _, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "bad name"}); !errors.Is(err, fsm.ErrInvalid) {
			t.Fatalf("bad name: %v", err)
		}
		e.createQueue("q", nil)
		c, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "q", MaxInFlight: 1 << 30})
		if err != nil || c.MaxInFlight() != MaxMaxInFlight {
			t.Fatalf("capped: %v %v", c, err)
		}
		e.stop()
		if _, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "q"}); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("after stop: %v", err)
		}
		if !errors.Is(c.Err(), ErrNotLeader) {
			t.Fatalf("consumer Err after stop: %v", c.Err())
		}
	})
}

func TestLeadershipLossAndNewTerm(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.LeaseGrace = 2 * time.Second })
		e.createQueue("q", &fsmv1.QueueConfig{VisibilityTimeoutMs: 1000})
		a := e.register("q", 10)
		e.enqueueN("q", 3, nil)
		old := e.recvN(a, 3)
		e.stop()
		select {
		case <-a.Done():
		default:
			t.Fatal("consumer not ended by leadership loss")
		}
		if !errors.Is(a.Err(), ErrNotLeader) {
			t.Fatalf("Err = %v", a.Err())
		}
		a.Close() // no-op now: nothing to release on a follower
		if e.p.proposed("release") != 0 {
			t.Fatal("Close after leadership loss proposed a release")
		}

		// The old leases are past their deadline, by less than the grace
		// period (leases past it by more get no grace: grace_test.go).
		e.advance(2 * time.Second)
		e.start()
		b := e.register("q", 10)
		if a.ID() == b.ID() {
			t.Fatal("consumer ids repeat across terms")
		}
		e.expectNone(b) // grace: the old leases may still be acked
		e.ack(old[0])
		e.advance(2 * time.Second)
		got := e.recvN(b, 2)
		for _, d := range got {
			if d.Attempt != 2 {
				t.Fatalf("attempt %d", d.Attempt)
			}
		}
		e.expectNone(b)
	})
}

// TestLeadershipLossHandsBackUnsent: when the term ends, the deliveries
// still in a consumer's buffer were never sent; the scheduler can no longer
// roll them back, so it hands exactly those (not the ones the stream took)
// to Config.HandBack, and an unprocessed nack of them on the next leader
// returns them uncounted.
func TestLeadershipLossHandsBackUnsent(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			handed []*fsmv1.Ref
		)
		e := newEnv(t, func(c *Config) {
			c.HandBack = func(refs []*fsmv1.Ref) {
				mu.Lock()
				defer mu.Unlock()
				handed = append(handed, refs...)
			}
		})
		e.createQueue("q", &fsmv1.QueueConfig{MaxDeliveries: 1})
		a := e.register("q", 5)
		ids := e.enqueueN("q", 5, nil)
		sent := e.recvN(a, 2) // the stream took these: they may have been sent
		e.idle()
		e.stop()
		mu.Lock()
		got := handed
		mu.Unlock()
		if len(got) != 3 {
			t.Fatalf("handed back %d refs, want the 3 never taken: %v", len(got), got)
		}
		for i, r := range got {
			if r.GetMessageId() != ids[2+i] || r.GetLeaseToken() == 0 {
				t.Fatalf("handed back %v, want message %d under its token", r, ids[2+i])
			}
		}
		// What the next leader does with them: an unprocessed nack.
		items := make([]*fsmv1.NackOne, len(got))
		for i, r := range got {
			items[i] = &fsmv1.NackOne{Ref: r, Uncounted: true}
		}
		res, err := fsm.As[*fsm.ItemsResult](e.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: items}}}), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range res.Items {
			if err != nil {
				t.Fatalf("nack %d: %v", i, err)
			}
		}
		if st := e.info("q").Stats; st.Ready != 3 || st.InFlight != 2 || st.DeadLettered != 0 {
			t.Fatalf("stats %+v, want the 3 handed back ready and the 2 sent still leased", st)
		}
		peek, err := e.f.Reader().Peek("q", 10, false)
		if err != nil || len(peek) != 3 {
			t.Fatalf("peek %v %v", peek, err)
		}
		for _, d := range peek {
			if d.Attempt != 0 {
				t.Fatalf("message %d handed back with attempt %d", d.ID, d.Attempt)
			}
		}
		for _, d := range sent {
			if d.Attempt != 1 {
				t.Fatalf("sent message %d attempt %d", d.ID, d.Attempt)
			}
		}
	})
}

func TestQueueDeletedEndsConsumers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		c := e.register("q", 10)
		e.apply(&fsmv1.Command{Op: &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: "q"}}})
		select {
		case <-c.Done():
		case <-time.After(waitTimeout):
			t.Fatal("consumer not ended")
		}
		if !errors.Is(c.Err(), fsm.ErrQueueNotFound) || e.s.Consumers("q") != 0 {
			t.Fatalf("Err = %v, consumers %d", c.Err(), e.s.Consumers("q"))
		}
		// The consumer's error names the queue that went away.
		if want := "queue not found: q (deleted"; !strings.HasPrefix(c.Err().Error(), want) {
			t.Fatalf("Err = %q, want it to start with %q", c.Err(), want)
		}
	})
}

// TestCloseRollsBackUnsentDeliveries: deliveries still in the buffer when
// the stream ends never reached the client, so they return uncounted.
func TestCloseRollsBackUnsentDeliveries(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		ids := e.enqueueN("q", 3, nil)
		c := e.register("q", 3)
		e.idle()
		if n := c.Buffered(); n != 3 {
			t.Fatalf("%d buffered deliveries, want 3", n)
		}
		sent, _ := c.TakeOne() // the stream sent one; two stay buffered
		c.Close()
		e.idle()
		peek, err := e.f.Reader().Peek("q", 10, false)
		if err != nil || len(peek) != 3 {
			t.Fatalf("peek %v %v", peek, err)
		}
		for _, d := range peek {
			want := int32(0)
			if d.ID == sent.ID {
				want = 1 // sent, so the release counts it
			}
			if d.Attempt != want {
				t.Fatalf("message %d attempt %d, want %d (ids %v)", d.ID, d.Attempt, want, ids)
			}
		}
	})
}

// TestSettlingFreesCreditBeforeTheAckApplies: leases whose acks are being
// committed count as settled, exactly once: not before Settling, not twice
// once the ack has applied, and not for a ref with a stale token.
func TestSettlingFreesCreditBeforeTheAckApplies(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		c := e.register("q", 2)
		e.enqueueN("q", 5, nil)
		ds := e.recvN(c, 2)
		e.expectNone(c) // credit used up

		stale := ref(t, ds[1])
		stale.LeaseToken++
		e.s.Settling([]*fsmv1.Ref{stale})()
		e.expectNone(c)

		done := e.s.Settling([]*fsmv1.Ref{ref(t, ds[0])})
		third := e.recv(c) // granted while the ack of ds[0] is not applied
		e.expectNone(c)    // 3 held, 1 of them settling: no more credit

		e.ack(ds[0]) // the ack applies: its lease leaves the view and the count together
		e.expectNone(c)
		done()
		e.expectNone(c)
		if n := e.leasesHeld(c.ID()); n != 2 {
			t.Fatalf("LeasesHeld = %d, want 2", n)
		}

		e.ack(ds[1], third)
		if got := e.recvN(c, 2); len(got) != 2 {
			t.Fatalf("credit after acks: %d deliveries", len(got))
		}
		e.expectNone(c)
	})
}

// TestStoppedConsumerIsGrantedNothing: a Lease stream that ended stops its
// consumer before the settles that reached the node first are applied. A
// hand-back among them (an unprocessed nack of everything the client held)
// frees the consumer's credit; a stopped consumer is not granted those
// messages again, so its release counts nothing and they come back with
// the attempts they had.
func TestStoppedConsumerIsGrantedNothing(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		a := e.register("q", 3)
		e.enqueueN("q", 3, nil)
		got := e.drain(a)
		if len(got) != 3 {
			t.Fatalf("a got %d, want 3", len(got))
		}
		a.Stop()
		items := make([]*fsmv1.NackOne, len(got))
		for i, d := range got {
			items[i] = &fsmv1.NackOne{Ref: ref(t, d), Uncounted: true}
		}
		if _, err := fsm.As[*fsm.ItemsResult](e.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: items}}}), nil); err != nil {
			t.Fatal(err)
		}
		e.expectNone(a)
		a.Close()
		e.idle()
		b := e.register("q", 10)
		again := e.drain(b)
		if len(again) != 3 {
			t.Fatalf("b got %d, want the 3 handed back", len(again))
		}
		for _, d := range again {
			if d.Attempt != 1 { // the hand-back and the release counted nothing
				t.Fatalf("message %d attempt %d, want 1", d.ID, d.Attempt)
			}
		}
	})
}

// TestGoneConsumerIsGrantedNothing: a consumer whose stream is over
// (ConsumerRequest.Gone closed) is granted nothing, before anyone calls
// Stop or Close: its handler may not have noticed yet.
func TestGoneConsumerIsGrantedNothing(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.createQueue("q", nil)
		gone := make(chan struct{})
		a, err := e.s.Register(context.Background(), ConsumerRequest{Queue: "q", Name: "a", MaxInFlight: 5, Gone: gone})
		if err != nil {
			t.Fatal(err)
		}
		e.enqueueN("q", 2, nil)
		if got := e.drain(a); len(got) != 2 {
			t.Fatalf("a got %d, want 2 while its stream is open", len(got))
		}
		close(gone)
		e.enqueueN("q", 2, nil)
		e.expectNone(a)
		if st := e.info("q").Stats; st.Ready != 2 {
			t.Fatalf("stats %+v, want the 2 new ones ready", st)
		}
		a.Close()
	})
}
