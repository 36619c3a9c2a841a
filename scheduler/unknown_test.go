package scheduler

import (
	"sync"
	"testing"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// Grants whose proposal ends with its outcome unknown (issue 20, hole 2):
// at a leadership transfer or step-down Raft answers ErrLeadershipLost for
// an entry the next term usually commits. Its messages are then leased to
// a consumer that never gets them; the pipeline holds their tokens, so it
// hands them back, and nothing waits for the visibility timeout or counts
// an attempt.

// collectHandBack is a Config.HandBack that records what it is given.
type collectHandBack struct {
	mu   sync.Mutex
	refs []*fsmv1.Ref
}

func (h *collectHandBack) opt(c *Config) {
	c.HandBack = func(refs []*fsmv1.Ref) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.refs = append(h.refs, refs...)
	}
}

func (h *collectHandBack) got() []*fsmv1.Ref {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*fsmv1.Ref(nil), h.refs...)
}

// nackUncounted applies what the next leader does with handed-back refs.
func (e *env) nackUncounted(refs []*fsmv1.Ref) {
	e.t.Helper()
	items := make([]*fsmv1.NackOne, len(refs))
	for i, r := range refs {
		items[i] = &fsmv1.NackOne{Ref: r, Uncounted: true}
	}
	res, err := fsm.As[*fsm.ItemsResult](e.apply(&fsmv1.Command{Op: &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: items}}}), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, err := range res.Items {
		if err != nil {
			e.t.Fatalf("nack %d: %v", refs[i].GetMessageId(), err)
		}
	}
}

// checkHandedBackHeld: refs name exactly ids, each under the token its
// lease holds in the state.
func (e *env) checkHandedBackHeld(refs []*fsmv1.Ref, ids []uint64) {
	e.t.Helper()
	if len(refs) != len(ids) {
		e.t.Fatalf("handed back %v, want messages %v", refs, ids)
	}
	for i, r := range refs {
		var token uint64
		var ok bool
		e.f.Reader().Read(func(v fsm.View) { _, token, ok = v.Lease(r.GetQueue(), r.GetMessageId()) })
		if r.GetMessageId() != ids[i] || !ok || r.GetLeaseToken() == 0 || token != r.GetLeaseToken() {
			e.t.Fatalf("handed back %v; message %d leased %v under token %d", r, ids[i], ok, token)
		}
	}
}

// checkReadyUncounted: the queue holds ids ready, none with an attempt.
func (e *env) checkReadyUncounted(queue string, ids []uint64) {
	e.t.Helper()
	if st := e.info(queue).Stats; st.Ready != int64(len(ids)) || st.InFlight != 0 || st.DeadLettered != 0 {
		e.t.Fatalf("stats %+v, want %d ready", st, len(ids))
	}
	peek, err := e.f.Reader().Peek(queue, 10, false)
	if err != nil || len(peek) != len(ids) {
		e.t.Fatalf("peek %v %v", peek, err)
	}
	for i, d := range peek {
		if d.ID != ids[i] || d.Attempt != 0 {
			e.t.Fatalf("message %d ready with attempt %d, want %d uncounted", d.ID, d.Attempt, ids[i])
		}
	}
}

// TestLostGrantIsHandedBack: a LeaseGrant that committed although its
// proposal answered "leadership lost" is handed back by its tokens
// (Config.HandBack, which goes to whoever leads); the next leader's
// unprocessed nack returns the messages uncounted, so with
// max_deliveries = 1 nothing is dead-lettered unseen.
func TestLostGrantIsHandedBack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var hb collectHandBack
		e := newEnv(t, hb.opt)
		e.raise(fsm.AuthVersion) // lease tokens drawn by the leader
		e.createQueue("q", &fsmv1.QueueConfig{MaxDeliveries: 1, VisibilityTimeoutMs: 60_000})
		e.p.loseOnce(isOp("grant"))
		c := e.register("q", 10)
		ids := e.enqueueN("q", 2, nil)
		e.idle()
		e.expectNone(c)
		back := hb.got()
		e.checkHandedBackHeld(back, ids)
		e.stop() // the term ends, as it does after a step-down
		e.nackUncounted(back)
		e.checkReadyUncounted("q", ids)
	})
}

// TestLostGrantRolledBackWithoutHandBack: with no HandBack, a term that
// still runs rolls the lost grant back itself: the message is ready again
// uncounted and is delivered at once, well before its visibility timeout.
func TestLostGrantRolledBackWithoutHandBack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.raise(fsm.AuthVersion)
		e.createQueue("q", &fsmv1.QueueConfig{MaxDeliveries: 1, VisibilityTimeoutMs: 60_000})
		e.p.loseOnce(isOp("grant"))
		c := e.register("q", 10)
		ids := e.enqueueN("q", 1, nil)
		e.idle()
		if e.p.proposed("rollback") != 1 {
			t.Fatalf("rollbacks proposed: %d, want 1", e.p.proposed("rollback"))
		}
		e.advance(maxBackoff)
		d := e.recv(c)
		if d.ID != ids[0] || d.Attempt != 1 {
			t.Fatalf("redelivery %+v, want message %d at attempt 1", d, ids[0])
		}
		if st := e.info("q").Stats; st.DeadLettered != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestLostCarriedGrantIsHandedBack: the same for grants carried by an ack
// entry (log version 10): the ack's answer is lost with the entry, and
// the carried grant is handed back by its token.
func TestLostCarriedGrantIsHandedBack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var hb collectHandBack
		e := newEnv(t, carryGrants, hb.opt)
		e.raise(fsm.AckGrantVersion)
		e.createQueue("q", &fsmv1.QueueConfig{MaxDeliveries: 1, VisibilityTimeoutMs: 60_000})
		ids := e.enqueueN("q", 2, nil)
		c := e.register("q", 1)
		d := e.recv(c)
		e.p.loseOnce(isOp("ack+grant"))
		refs := []*fsmv1.Ref{ref(t, d)}
		done := e.s.Settling(refs)
		if _, err := e.proposeAck(t.Context(), &fsmv1.Command{Op: &fsmv1.Command_Ack{Ack: &fsmv1.Ack{Refs: refs}}}); err == nil {
			t.Fatal("lost ack entry answered no error")
		}
		done()
		e.idle()
		e.expectNone(c)
		back := hb.got()
		e.checkHandedBackHeld(back, ids[1:])
		e.stop()
		e.nackUncounted(back)
		e.checkReadyUncounted("q", ids[1:])
	})
}
