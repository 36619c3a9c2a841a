package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// raise proposes SetClusterVersion{v} in an entry of version v, as the
// leader's version raiser does once every voter applies v.
func (e *env) raise(v uint32) {
	e.t.Helper()
	set := &fsmv1.SetClusterVersion{Version: v}
	if v >= fsm.HandoverVersion {
		// The raise to the handover names the meta group's founders.
		set.MetaFounders = []*fsmv1.MetaServer{{Id: "n1", Address: "127.0.0.1:7001"}}
	}
	e.apply(&fsmv1.Command{Version: v, Op: &fsmv1.Command_SetClusterVersion{SetClusterVersion: set}})
}

// carryGrants turns on acks carrying grants.
func carryGrants(c *Config) { c.CarryGrants = true }

// proposeAck proposes an ack entry as the data group's ack coalescer
// does (broker.Broker.proposeAck): the grants CarryAck puts in it, the
// entry through the proposer, its outcome to the ride's Settle.
func (e *env) proposeAck(ctx context.Context, cmd *fsmv1.Command) (fsm.Result, error) {
	r := e.s.CarryAck(cmd)
	res, err := e.s.propose(ctx, cmd)
	return r.Settle(res, err)
}

// settle acks ds as the broker's Ack does: Settling first, then the ack
// entry proposed as the ack coalescer proposes it (proposeAck), done once
// it has applied.
func (e *env) settle(ds ...*state.Delivery) {
	e.t.Helper()
	refs := make([]*fsmv1.Ref, len(ds))
	for i, d := range ds {
		refs[i] = ref(e.t, d)
	}
	done := e.s.Settling(refs)
	defer done()
	res, err := fsm.As[*fsm.ItemsResult](e.proposeAck(context.Background(), &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}}))
	if err != nil {
		e.t.Fatalf("ack: %v", err)
	}
	for i, err := range res.Items {
		if err != nil {
			e.t.Fatalf("ack %d: %v", ds[i].ID, err)
		}
	}
}

// TestAckCarriesNextGrant: with CarryGrants at log version 10 a consumer
// working through a backlog costs one entry per delivery: every ack's
// entry carries the grant of the credit it frees, and no LeaseGrant entry
// follows it. Below version 10, or without CarryGrants (the default),
// each delivery is a grant entry and an ack entry, as before. Entries are
// counted at the fake Raft.
func TestAckCarriesNextGrant(t *testing.T) {
	const msgs, credit = 40, 4
	for _, tc := range []struct {
		name    string
		version uint32
		enable  bool // Config.CarryGrants
		carry   bool
	}{
		{"version 10", fsm.AckGrantVersion, true, true},
		{"version 8", 8, true, false},
		{"version 10, not enabled", fsm.AckGrantVersion, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				e := newEnv(t, func(c *Config) { c.CarryGrants = tc.enable })
				e.raise(tc.version)
				e.createQueue("q", nil)
				e.enqueueN("q", msgs, nil)
				c := e.register("q", credit)
				e.idle() // the first grant fills the credit
				before := e.f.Reader().AppliedIndex()
				grants0 := e.p.proposed("grant")
				var got []uint64
				for len(got) < msgs {
					d := e.recv(c)
					if d.Attempt != 1 {
						t.Fatalf("message %d attempt %d", d.ID, d.Attempt)
					}
					got = append(got, d.ID)
					e.settle(d)
					// The next ack comes once this one's outcome has been
					// handled: until then its grant counts twice against
					// the credit (DESIGN.md, Credit is derived).
					e.idle()
				}
				e.idle()
				e.expectNone(c)
				if !slices.IsSorted(got) || len(got) != msgs {
					t.Fatalf("delivered out of FIFO order: %v", got)
				}
				if st := e.info("q").Stats; st.Ready != 0 || st.InFlight != 0 {
					t.Fatalf("stats %+v", st)
				}
				entries := e.f.Reader().AppliedIndex() - before
				carried := e.p.proposed("ack+grant")
				standalone := e.p.proposed("grant") - grants0
				t.Logf("%d deliveries: %d entries (%d acks carrying grants, %d grant entries)", msgs, entries, carried, standalone)
				if tc.carry {
					// Every ack but the last credit's worth carries the
					// next message: one entry per delivery.
					if entries != msgs || carried != msgs-credit || standalone != 0 {
						t.Fatalf("%d entries, %d acks carried grants, %d grant entries; want %d, %d, 0", entries, carried, standalone, msgs, msgs-credit)
					}
					return
				}
				// Each freed credit is a grant entry of its own (two may
				// share one when the loop's pass comes late).
				if carried != 0 || entries != msgs+uint64(standalone) || entries < 3*msgs/2 {
					t.Fatalf("%d entries, %d acks carried grants, %d grant entries", entries, carried, standalone)
				}
			})
		})
	}
}

// TestCarriedGrantsSelectAsBefore: the selection does not change when
// grants ride in acks: priorities, DRR over weighted fairness keys and
// throttles deliver the same messages in the same order, and the same
// attempts, whether each grant has its own entry or rides in the ack that
// freed its credit.
func TestCarriedGrantsSelectAsBefore(t *testing.T) {
	run := func(t *testing.T, separate bool, credit int) ([]string, int64) {
		var order []string
		var carried int64
		bubble(t, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.CarryGrants = !separate })
			e.raise(fsm.AckGrantVersion)
			e.createQueue("q", &fsmv1.QueueConfig{Throttles: map[string]*fsmv1.ThrottleRule{"slow": {RatePerSec: 50, Burst: 2}}})
			for i := range 12 {
				key := fmt.Sprintf("k%d", i%3)
				e.enqueue("q", &fsmv1.EnqueueMessage{Payload: []byte(fmt.Sprint(i)), FairnessKey: key, Weight: uint32(i%3 + 1)})
			}
			e.enqueueN("q", 4, &fsmv1.EnqueueMessage{Priority: 5})
			e.enqueueN("q", 5, &fsmv1.EnqueueMessage{ThrottleKeys: []string{"slow"}, FairnessKey: "k1"})
			c := e.register("q", credit)
			for len(order) < 21 {
				e.idle()
				var ds []*state.Delivery
				c.Take(func(d *state.Delivery) bool {
					ds = append(ds, d)
					return true
				})
				if len(ds) == 0 {
					e.advance(10 * time.Millisecond) // a throttle token
					continue
				}
				for _, d := range ds {
					order = append(order, fmt.Sprintf("%d/%d", d.ID, d.Attempt))
					e.settle(d)
				}
			}
			carried = e.p.proposed("ack+grant")
		})
		return order, carried
	}
	for _, credit := range []int{1, 3} {
		t.Run(fmt.Sprint("credit ", credit), func(t *testing.T) {
			sep, c0 := run(t, true, credit)
			car, c1 := run(t, false, credit)
			if c0 != 0 || c1 == 0 {
				t.Fatalf("acks carrying grants: %d separate, %d carrying", c0, c1)
			}
			if !slices.Equal(sep, car) {
				t.Fatalf("selection changed:\nseparate %v\ncarried  %v", sep, car)
			}
		})
	}
}

// TestFailedAckEntryFreesCarriedGrants: an ack entry refused at proposal
// (nothing applied) takes its carried grants with it: their messages are
// pickable again and go in a grant of their own, counted once.
func TestFailedAckEntryFreesCarriedGrants(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, carryGrants)
		e.raise(fsm.AckGrantVersion)
		e.createQueue("q", nil)
		ids := e.enqueueN("q", 2, nil)
		c := e.register("q", 1)
		d := e.recv(c)
		e.p.setHook(func(ctx context.Context, cmd *fsmv1.Command) error {
			if len(cmd.GetAck().GetGrants()) > 0 {
				return errInjected
			}
			return nil
		})
		refs := []*fsmv1.Ref{ref(t, d)}
		done := e.s.Settling(refs)
		if _, err := e.proposeAck(context.Background(), &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}}); err == nil {
			t.Fatal("refused ack entry answered no error")
		}
		done()
		e.p.setHook(nil)
		e.idle()
		if cons, queue := e.pendingState(c); cons != 0 || queue != 0 {
			t.Fatalf("pending after a failed ack entry: consumer %d, queue %d", cons, queue)
		}
		e.expectNone(c) // the lease is still held: no credit
		e.settle(d)
		e.advance(maxBackoff)
		if d2 := e.recv(c); d2.ID != ids[1] || d2.Attempt != 1 {
			t.Fatalf("after the failed entry: %+v", d2)
		}
	})
}

// TestTermEndsWithCarriedGrantsInFlight: the term ends while an ack entry
// carrying a grant is still unapplied. When it applies, nobody can push
// the delivery, so it is handed back (Config.HandBack) by its lease token,
// never left to expire as a counted attempt; and RunLeader did not wait
// for the entry.
func TestTermEndsWithCarriedGrantsInFlight(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var mu sync.Mutex
		var back []*fsmv1.Ref
		e := newEnv(t, carryGrants, func(c *Config) {
			c.HandBack = func(refs []*fsmv1.Ref) { mu.Lock(); back = append(back, refs...); mu.Unlock() }
		})
		e.raise(fsm.AckGrantVersion)
		e.createQueue("q", nil)
		ids := e.enqueueN("q", 2, nil)
		c := e.register("q", 1)
		d := e.recv(c)
		entered, release := e.p.hold(isOp("ack+grant"))
		acked := make(chan struct{})
		go func() {
			defer close(acked)
			e.settle(d)
		}()
		<-entered
		e.stop() // returns although the ack entry has not applied
		close(release)
		<-acked
		e.idle()
		mu.Lock()
		defer mu.Unlock()
		if len(back) != 1 || back[0].GetMessageId() != ids[1] || back[0].GetLeaseToken() == 0 {
			t.Fatalf("handed back %v, want the carried grant of message %d", back, ids[1])
		}
		var holder string
		var token uint64
		e.f.Reader().Read(func(v fsm.View) { holder, token, _ = v.Lease("q", ids[1]) })
		if holder != c.ID() || token != back[0].GetLeaseToken() {
			t.Fatalf("lease of %d: holder %q token %d, handed back token %d", ids[1], holder, token, back[0].GetLeaseToken())
		}
	})
}

// TestCloseWaitsForCarriedGrant: a consumer closing while an ack entry
// carries a grant to it waits for that entry like any grant, then rolls
// the never-pushed delivery back before its release: no attempt counts,
// so with max_deliveries = 1 nothing is dead-lettered unseen.
func TestCloseWaitsForCarriedGrant(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t, carryGrants)
		e.raise(fsm.AckGrantVersion)
		e.createQueue("q", &fsmv1.QueueConfig{MaxDeliveries: 1})
		ids := e.enqueueN("q", 2, nil)
		c := e.register("q", 1)
		d := e.recv(c)
		entered, release := e.p.hold(isOp("ack+grant"))
		acked := make(chan struct{})
		go func() {
			defer close(acked)
			e.settle(d)
		}()
		<-entered
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			c.Close()
		}()
		e.idle()
		close(release)
		<-acked
		<-closed
		e.idle()
		if st := e.info("q").Stats; st.DeadLettered != 0 || st.Ready != 1 || st.InFlight != 0 {
			t.Fatalf("stats after close: %+v", st)
		}
		peek, err := e.f.Reader().Peek("q", 10, false)
		if err != nil || len(peek) != 1 || peek[0].ID != ids[1] || peek[0].Attempt != 0 {
			t.Fatalf("peek %v %v", peek, err)
		}
	})
}
