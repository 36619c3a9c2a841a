package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// cmdGen produces random but plausible command sequences: mostly valid
// operations on a few queues, with stale tokens, unknown ids and bad
// values mixed in.
type cmdGen struct {
	r      *rand.Rand
	f      *FSM // the model the generator peeks at to pick ids
	now    int64
	leases []*state.Delivery
	queues []string
}

func (g *cmdGen) queue() string { return g.queues[g.r.IntN(len(g.queues))] }

// idempotencyKey is none, or one of a few keys, so that repeats happen.
func (g *cmdGen) idempotencyKey() string {
	if g.r.IntN(2) == 0 {
		return ""
	}
	return fmt.Sprint("i", g.r.IntN(3))
}

// grants leases a few of q's next ready messages, with now and then an
// unknown id and no token.
func (g *cmdGen) grants(q string) []*fsmv1.Grant {
	ds, _ := g.f.Reader().Peek(q, 1+g.r.IntN(4), false)
	var gs []*fsmv1.Grant
	for _, d := range ds {
		gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: d.ID, ConsumerId: fmt.Sprint("c", g.r.IntN(3)), DeadlineMs: g.now + int64(g.r.IntN(300)), LeaseToken: g.r.Uint64() | 1})
	}
	if g.r.IntN(5) == 0 {
		gs = append(gs, &fsmv1.Grant{Queue: q, MessageId: uint64(g.r.IntN(1 << 30)), ConsumerId: "c0"})
	}
	return gs
}

func (g *cmdGen) next() *fsmv1.Command {
	g.now += int64(g.r.IntN(50))
	if g.r.IntN(40) == 0 {
		g.now -= 100 // clocks of different leaders disagree
	}
	c := &fsmv1.Command{NowMs: g.now}
	if g.r.IntN(10) == 0 {
		g.authOp(c)
		return c
	}
	if g.r.IntN(12) == 0 {
		g.pauseOp(c)
		return c
	}
	switch n := g.r.IntN(100); {
	case n < 4:
		cfg := &fsmv1.QueueConfig{MaxDeliveries: int32(g.r.IntN(4)), VisibilityTimeoutMs: int64(g.r.IntN(300)), MessageTtlMs: int64(g.r.IntN(2) * 500)}
		if g.r.IntN(3) == 0 {
			cfg.DeadLetterQueue = "shared"
		}
		switch g.r.IntN(4) { // admission at apply (version 9)
		case 0:
			cfg.MaxDepth = int64(1 + g.r.IntN(8))
		case 1:
			cfg.MaxBytes = int64(300 + g.r.IntN(3000))
		}
		c.Op = &fsmv1.Command_CreateQueue{CreateQueue: &fsmv1.CreateQueue{Name: g.queue(), Config: cfg}}
	case n < 6:
		c.Op = &fsmv1.Command_DeleteQueue{DeleteQueue: &fsmv1.DeleteQueue{Name: g.queue(), IdempotencyKey: g.idempotencyKey()}} // keyed: version 11
	case n < 8:
		c.Op = &fsmv1.Command_UpdateQueue{UpdateQueue: &fsmv1.UpdateQueue{Name: g.queue(), Config: &fsmv1.QueueConfig{MaxDeliveries: int32(g.r.IntN(5))}, Mask: []string{"max_deliveries"}}}
	case n < 9:
		c.Op = &fsmv1.Command_PurgeQueue{PurgeQueue: &fsmv1.PurgeQueue{Name: g.queue(), IdempotencyKey: g.idempotencyKey()}}
	case n < 12:
		rd := &fsmv1.Redrive{Queue: g.queue(), Limit: int64(g.r.IntN(3)), IdempotencyKey: g.idempotencyKey()}
		switch g.r.IntN(10) { // version 14's fields, ignored in older entries
		case 0:
			rd.FairnessKey = fmt.Sprint("k", g.r.IntN(4))
		case 1:
			rd.ReasonContains = []string{"ttl", "max", "nack"}[g.r.IntN(3)]
		case 2:
			rd.OlderThanMs = int64(g.r.IntN(300))
		case 3:
			rd.DryRun = true
		case 4, 5, 6, 7, 8:
			rd.RateMilli = int64(1 + g.r.IntN(20_000))
		}
		c.Op = &fsmv1.Command_Redrive{Redrive: rd}
	case n < 15:
		// Step the jobs in progress (version 14), and one that is not.
		refs := []*fsmv1.RedriveJobRef{{Queue: g.queue(), Id: uint64(g.r.IntN(1000))}}
		for _, q := range g.queues {
			if qi, err := g.f.Reader().GetQueue(q); err == nil {
				for _, j := range qi.Redrives {
					refs = append(refs, &fsmv1.RedriveJobRef{Queue: q, Id: j.ID})
				}
			}
		}
		c.Op = &fsmv1.Command_RedriveStep{RedriveStep: &fsmv1.RedriveStep{Jobs: refs}}
	case n < 35:
		var batches []*fsmv1.EnqueueBatch
		for b := 0; b < 1+g.r.IntN(2); b++ {
			var msgs []*fsmv1.EnqueueMessage
			for i := 0; i < 1+g.r.IntN(5); i++ {
				m := &fsmv1.EnqueueMessage{
					Payload:     []byte(fmt.Sprint(g.r.IntN(1000))),
					Priority:    int32(g.r.IntN(3)),
					FairnessKey: fmt.Sprint("k", g.r.IntN(4)),
					Weight:      uint32(g.r.IntN(4)),
				}
				if g.r.IntN(5) == 0 {
					m.DelayMs = int64(g.r.IntN(200))
				}
				if g.r.IntN(6) == 0 {
					m.TtlMs = int64(g.r.IntN(400))
				}
				if g.r.IntN(4) == 0 {
					m.DedupId = fmt.Sprint("d", g.r.IntN(10))
				}
				if g.r.IntN(30) == 0 {
					m.DelayMs = -1
				}
				if g.r.IntN(5) == 0 {
					m.Headers = map[string]string{"h": fmt.Sprint(g.r.IntN(10))}
				}
				if g.r.IntN(5) == 0 {
					m.ThrottleKeys = []string{fmt.Sprint("t", g.r.IntN(3))}
				}
				msgs = append(msgs, m)
			}
			batches = append(batches, &fsmv1.EnqueueBatch{Queue: g.queue(), Messages: msgs})
		}
		c.Op = &fsmv1.Command_Enqueue{Enqueue: &fsmv1.Enqueue{Batches: batches}}
	case n < 55:
		c.Op = &fsmv1.Command_LeaseGrant{LeaseGrant: &fsmv1.LeaseGrant{Grants: g.grants(g.queue())}}
	case n < 92 && len(g.leases) > 0:
		i := g.r.IntN(len(g.leases))
		d := g.leases[i]
		if g.r.IntN(4) != 0 { // keep some stale ones around
			g.leases = append(g.leases[:i], g.leases[i+1:]...)
		}
		refs := []*fsmv1.Ref{ref(d)}
		switch g.r.IntN(6) {
		case 0, 1:
			ack := &fsmv1.Ack{Refs: refs}
			if g.r.IntN(2) == 0 {
				// The ack carries grants (log version 10; ignored in
				// older entries), some of them of the message it acks.
				ack.Grants = g.grants(d.Queue)
				if g.r.IntN(4) == 0 {
					ack.Grants = append(ack.Grants, &fsmv1.Grant{Queue: d.Queue, MessageId: d.ID, ConsumerId: "c1", DeadlineMs: g.now + 100, LeaseToken: g.r.Uint64() | 1})
				}
			}
			c.Op = &fsmv1.Command_Ack{Ack: ack}
		case 2:
			// Uncounted with a delay: the delay is kept from log version 11.
			c.Op = &fsmv1.Command_Nack{Nack: &fsmv1.Nack{Items: []*fsmv1.NackOne{{Ref: refs[0], DelayMs: int64(g.r.IntN(100)), DeadLetter: g.r.IntN(5) == 0, Uncounted: g.r.IntN(4) == 0}}}}
		case 3:
			c.Op = &fsmv1.Command_Extend{Extend: &fsmv1.Extend{Refs: refs, ExtendByMs: int64(g.r.IntN(200))}}
		case 4:
			c.Op = &fsmv1.Command_LeaseExpire{LeaseExpire: &fsmv1.LeaseExpire{Refs: refs}}
		default:
			c.Op = &fsmv1.Command_LeaseRollback{LeaseRollback: &fsmv1.LeaseRollback{Refs: refs}}
		}
	case n < 95:
		c.Op = &fsmv1.Command_ReleaseConsumer{ReleaseConsumer: &fsmv1.ReleaseConsumer{ConsumerId: fmt.Sprint("c", g.r.IntN(3))}}
	case n < 96:
		c.Op = &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}
	case n < 97:
		mq := int64(2000 + g.r.IntN(20_000)) // an unknown command below version 9
		set := &fsmv1.SetClusterSettings{MaxQueuedBytes: &mq}
		if g.r.IntN(2) == 0 {
			// max_queues (log version 11; ignored before): a few, so
			// that creates are refused now and then.
			n := int64(g.r.IntN(8))
			set.MaxQueues = &n
		}
		c.Op = &fsmv1.Command_SetClusterSettings{SetClusterSettings: set}
	default:
		c.Op = &fsmv1.Command_Tick{Tick: &fsmv1.Tick{}}
	}
	if g.r.IntN(8) == 0 {
		g.addNil(c)
	}
	return c
}

// authOp is a token or grant change: mostly valid, on a few identities,
// token names and patterns so that repeats, revocations of what exists and
// ungrants of what was granted happen; with invalid names, patterns,
// permission sets, hash lengths, already expired tokens and reused hashes
// mixed in.
func (g *cmdGen) authOp(c *fsmv1.Command) {
	pick := func(xs ...string) string { return xs[g.r.IntN(len(xs))] }
	identity := func() string { return pick("alice", "bob", "svc.ci@x", "carol", "", "bad name") }
	pattern := func() string { return pick("a", "a*", "*", "shared.*", "a.dlq", "", "bad?") }
	tokenName := func() string { return pick("t0", "t1", "t2", "t3", "bad token") }
	switch g.r.IntN(4) {
	case 0:
		// Hashes come from a few seeds, so a reused hash is refused now
		// and then; one in ten is the wrong length.
		h := sha256.Sum256([]byte(fmt.Sprint("secret", g.r.IntN(8))))
		hash := h[:]
		if g.r.IntN(10) == 0 {
			hash = hash[:31]
		}
		var expires int64
		if g.r.IntN(3) == 0 {
			expires = g.now + int64(g.r.IntN(400)) - 100 // some already expired
		}
		c.Op = &fsmv1.Command_CreateToken{CreateToken: &fsmv1.CreateToken{Name: tokenName(), Identity: identity(), Sha256: hash, ExpiresUnixMs: expires}}
	case 1:
		c.Op = &fsmv1.Command_RevokeToken{RevokeToken: &fsmv1.RevokeToken{Name: tokenName()}}
	case 2:
		if g.r.IntN(5) == 0 {
			grant := &fsmv1.AuthGrant{Identity: identity(), Admin: true}
			if g.r.IntN(5) == 0 {
				grant.Pattern = pattern() // an admin grant names no pattern
			}
			c.Op = &fsmv1.Command_AuthGrant{AuthGrant: grant}
			return
		}
		// 0 and bits past manage are invalid permission sets.
		c.Op = &fsmv1.Command_AuthGrant{AuthGrant: &fsmv1.AuthGrant{Identity: identity(), Pattern: pattern(), Perms: uint32(g.r.IntN(20))}}
	default:
		if g.r.IntN(4) == 0 {
			c.Op = &fsmv1.Command_AuthUngrant{AuthUngrant: &fsmv1.AuthUngrant{Identity: identity(), Admin: true}}
			return
		}
		c.Op = &fsmv1.Command_AuthUngrant{AuthUngrant: &fsmv1.AuthUngrant{Identity: identity(), Pattern: pattern()}}
	}
}

// pauseOp is a PauseQueue or ResumeQueue (log version 17; ignored in
// older entries): of the whole queue or of one of the fairness keys the
// generator enqueues with (or of one no message has, which the pause
// must hold for), until resumed or for a few steps of the clock so that
// the sweep ends timed pauses too; a new pause replaces an old one's end.
// Resumes outnumber pauses a little, or most queues would stay paused
// and grants would be refused for little else. Mixed in: unknown queues
// (the generator names queues before creating them), a key over
// MaxKeyLen, and durations below 0 and past MaxDurationMs.
func (g *cmdGen) pauseOp(c *fsmv1.Command) {
	key := ""
	switch g.r.IntN(3) {
	case 0:
		key = fmt.Sprint("k", g.r.IntN(4))
	case 1:
		key = "k9" // no message has it
	}
	if g.r.IntN(20) == 0 {
		key = strings.Repeat("k", state.MaxKeyLen+1)
	}
	if g.r.IntN(9) >= 4 {
		c.Op = &fsmv1.Command_ResumeQueue{ResumeQueue: &fsmv1.ResumeQueue{Name: g.queue(), FairnessKey: key}}
		return
	}
	var d int64
	switch g.r.IntN(10) {
	case 0, 1, 2:
		// 0: until resumed.
	case 3:
		d = -1 - int64(g.r.IntN(100))
	case 4:
		d = state.MaxDurationMs + 1
	default:
		d = 1 + int64(g.r.IntN(400))
	}
	c.Op = &fsmv1.Command_PauseQueue{PauseQueue: &fsmv1.PauseQueue{Name: g.queue(), FairnessKey: key, DurationMs: d}}
}

// addNil puts a nil element into one of c's lists, as a buggy proposer
// might: it marshals as an empty message, so every replica must see an
// empty message there, the leader included.
func (g *cmdGen) addNil(c *fsmv1.Command) {
	at := func(n int) int { return g.r.IntN(n + 1) }
	switch op := c.Op.(type) {
	case *fsmv1.Command_Enqueue:
		bs := op.Enqueue.Batches
		if g.r.IntN(4) == 0 {
			op.Enqueue.Batches = slices.Insert(bs, at(len(bs)), (*fsmv1.EnqueueBatch)(nil))
			return
		}
		b := bs[g.r.IntN(len(bs))]
		b.Messages = slices.Insert(b.Messages, at(len(b.Messages)), (*fsmv1.EnqueueMessage)(nil))
	case *fsmv1.Command_LeaseGrant:
		gs := op.LeaseGrant.Grants
		op.LeaseGrant.Grants = slices.Insert(gs, at(len(gs)), (*fsmv1.Grant)(nil))
	case *fsmv1.Command_Ack:
		if len(op.Ack.Grants) > 0 && g.r.IntN(2) == 0 {
			op.Ack.Grants = slices.Insert(op.Ack.Grants, at(len(op.Ack.Grants)), (*fsmv1.Grant)(nil))
			return
		}
		op.Ack.Refs = slices.Insert(op.Ack.Refs, at(len(op.Ack.Refs)), (*fsmv1.Ref)(nil))
	case *fsmv1.Command_Nack:
		op.Nack.Items = slices.Insert(op.Nack.Items, at(len(op.Nack.Items)), (*fsmv1.NackOne)(nil))
	case *fsmv1.Command_Extend:
		op.Extend.Refs = slices.Insert(op.Extend.Refs, at(len(op.Extend.Refs)), (*fsmv1.Ref)(nil))
	case *fsmv1.Command_LeaseRollback:
		rs := op.LeaseRollback.Refs
		op.LeaseRollback.Refs = slices.Insert(rs, at(len(rs)), (*fsmv1.Ref)(nil))
	}
}

// scribble changes everything reachable from c in place, as a proposer
// that reuses its buffers after Propose returned (or, racing, before the
// entry applied) would. No replica may see it: the state is what the
// entry's bytes say.
func scribble(c *fsmv1.Command) {
	c.NowMs += 1_000_000
	switch op := c.Op.(type) {
	case *fsmv1.Command_Enqueue:
		for _, b := range op.Enqueue.Batches {
			if b == nil {
				continue
			}
			for i, m := range b.Messages {
				if m == nil {
					b.Messages[i] = &fsmv1.EnqueueMessage{Payload: []byte("filled in")}
					continue
				}
				for j := range m.Payload {
					m.Payload[j] ^= 0xff
				}
				if m.Headers != nil {
					m.Headers["h"] = "changed"
					m.Headers["extra"] = "added"
				}
				for j := range m.ThrottleKeys {
					m.ThrottleKeys[j] = "changed"
				}
				m.FairnessKey += "-changed"
				m.Weight++
				m.DelayMs += 1000
				m.DedupId += "-changed"
			}
		}
	case *fsmv1.Command_CreateQueue:
		if cfg := op.CreateQueue.Config; cfg != nil {
			cfg.MaxDeliveries++
			cfg.DeadLetterQueue = ""
		}
	case *fsmv1.Command_UpdateQueue:
		op.UpdateQueue.Config.MaxDeliveries++
	case *fsmv1.Command_LeaseGrant:
		for i, gr := range op.LeaseGrant.Grants {
			if gr == nil {
				op.LeaseGrant.Grants[i] = &fsmv1.Grant{}
				continue
			}
			gr.ConsumerId += "-changed"
			gr.DeadlineMs += 1000
		}
	case *fsmv1.Command_Ack:
		for _, r := range op.Ack.Refs {
			if r != nil {
				r.LeaseToken++
			}
		}
		for i, gr := range op.Ack.Grants {
			if gr == nil {
				op.Ack.Grants[i] = &fsmv1.Grant{}
				continue
			}
			gr.ConsumerId += "-changed"
			gr.DeadlineMs += 1000
		}
	case *fsmv1.Command_Nack:
		for _, it := range op.Nack.Items {
			if it != nil {
				it.DeadLetter = !it.DeadLetter
			}
		}
	case *fsmv1.Command_Extend:
		op.Extend.ExtendByMs += 1000
	case *fsmv1.Command_CreateToken:
		for j := range op.CreateToken.Sha256 {
			op.CreateToken.Sha256[j] ^= 0xff
		}
		op.CreateToken.Name += "-changed"
		op.CreateToken.Identity += "-changed"
	case *fsmv1.Command_RevokeToken:
		op.RevokeToken.Name += "-changed"
	case *fsmv1.Command_AuthGrant:
		op.AuthGrant.Identity += "-changed"
		op.AuthGrant.Perms ^= 0xf
		op.AuthGrant.Admin = !op.AuthGrant.Admin
	case *fsmv1.Command_AuthUngrant:
		op.AuthUngrant.Pattern += "-changed"
	case *fsmv1.Command_PauseQueue:
		op.PauseQueue.Name += "-changed"
		op.PauseQueue.FairnessKey += "-changed"
		op.PauseQueue.DurationMs += 1000
	case *fsmv1.Command_ResumeQueue:
		op.ResumeQueue.Name += "-changed"
		op.ResumeQueue.FairnessKey += "-changed"
	}
}

func (g *cmdGen) observe(res Result) {
	gr, ok := res.(*GrantResult)
	if ag, carried := res.(*AckGrantResult); carried {
		gr, ok = ag.Granted, true
	}
	if !ok {
		return
	}
	for _, d := range gr.Deliveries {
		if d != nil {
			g.leases = append(g.leases, d)
		}
	}
}

func digestOf(t *testing.T, f *FSM) string {
	t.Helper()
	_, d, err := f.Integrity().Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// propose encodes cmd and records it for the leader's FSM, exactly as
// Broker.Propose does.
func propose(t *testing.T, props *Proposals, cmd *fsmv1.Command) ([]byte, func()) {
	t.Helper()
	data, forget, err := props.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return data, forget
}

// TestRandomSequences: replicas applying the same log agree, whether they
// apply entry by entry or in batches, and whether they decode each entry or
// (as the leader does) take the command they proposed, even when that
// command had nil list elements or was changed after it was proposed;
// Verify holds after every step; a snapshot restores to the same digest
// and the restored replica keeps agreeing as the log goes on.
func TestRandomSequences(t *testing.T) {
	seeds := 20
	steps := 400
	if testing.Short() {
		seeds = 5
	}
	refusedFull, jobMoves := 0, 0
	var pauses struct{ done, refused, held int } // at PauseVersion or later
	defer func() {
		if refusedFull == 0 && !t.Failed() {
			t.Error("no enqueue was refused for a limit at apply: the generator no longer reaches admission")
		}
		if jobMoves == 0 && !t.Failed() {
			t.Error("no redrive step moved a message: the generator no longer reaches rate-limited redrives")
		}
		if (pauses.done == 0 || pauses.refused == 0 || pauses.held == 0) && !t.Failed() {
			t.Errorf("%d pauses and resumes applied, %d refused, %d grants refused for a pause: the generator no longer reaches pauses", pauses.done, pauses.refused, pauses.held)
		}
	}()
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			props := &Proposals{}
			single, batched := New(Options{Proposals: props}), New(Options{})
			g := &cmdGen{r: rand.New(rand.NewPCG(uint64(seed), 7)), f: single, now: 1_000, queues: []string{"a", "b", "shared", "a.dlq"}}
			var pending []*raft.Log
			// Odd seeds run at the newest cluster version, where key order
			// is state (a restored replica must also deliver in the same
			// order) and the clock moves by elapsed time within a term.
			// Seeds 1 mod 4 run at the newest version, where the auth
			// commands are refused (the meta group holds auth), seeds
			// 3 mod 4 at the last version whose log holds auth.
			version := uint32(1)
			switch seed % 4 {
			case 1:
				version = MaxLogVersion
			case 3:
				version = HandoverVersion - 1
			}
			term := uint64(1)
			var restored *FSM
			// Auth commands that changed the state, and that were
			// refused: both must happen, so that the digests compared
			// below cover tokens and grants, not only their absence.
			var authDone, authRefused int
			for i := 1; i <= steps; i++ {
				cmd := g.next()
				isAuth := isAuthCommand(cmd)
				isPause := isPauseCommand(cmd)
				_, isStep := cmd.Op.(*fsmv1.Command_RedriveStep)
				if version > 1 {
					cmd.Version = version
					if i == 1 {
						cmd.Op = &fsmv1.Command_SetClusterVersion{SetClusterVersion: &fsmv1.SetClusterVersion{Version: version, MaxQueuedBytes: int64(seed%4) * 4000, MetaFounders: foundersFor(version)}}
					}
				}
				// The leader's path, as Broker.Propose takes it; the
				// proposer's command is changed before the entry applies
				// and again after, and neither may show.
				isAuth = isAuthCommand(cmd) // the first step's may have been replaced
				data, forget := propose(t, props, cmd)
				if g.r.IntN(30) == 0 {
					term++ // a new leader, whose clock may disagree
				}
				l := &raft.Log{Index: uint64(i), Term: term, Type: raft.LogCommand, Data: data}
				if g.r.IntN(3) == 0 {
					scribble(cmd)
				}
				res := single.Apply(l).(Result)
				if isAuth && res.Failure() == nil {
					authDone++
				} else if isAuth {
					authRefused++
				}
				forget()
				scribble(cmd)
				g.observe(res)
				if err := single.Integrity().Verify(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if errors.Is(enqueueErrs(res), ErrQueueFull) {
					refusedFull++ // admission at apply (version 9)
				}
				if r, ok := res.(*CountResult); ok && isStep && r.Count > 0 {
					jobMoves++ // a redrive job moved messages (version 14)
				}
				if version >= PauseVersion {
					switch {
					case isPause && res.Failure() == nil:
						pauses.done++
					case isPause:
						pauses.refused++
					}
					pauses.held += pausedGrants(res)
				}
				if restored != nil {
					// A restored replica admits and refuses exactly as the
					// live one (counters and settings travel alike).
					if a, b := fmt.Sprint(enqueueErrs(res)), fmt.Sprint(enqueueErrs(restored.Apply(l).(Result))); a != b {
						t.Fatalf("step %d: live enqueue answered %s, restored %s", i, a, b)
					}
				}
				pending = append(pending, l)
				if len(pending) >= 1+g.r.IntN(8) {
					batched.ApplyBatch(pending)
					pending = nil
					if err := batched.Integrity().Verify(); err != nil {
						t.Fatalf("batched step %d: %v", i, err)
					}
					if a, b := digestOf(t, single), digestOf(t, batched); a != b {
						t.Fatalf("step %d: single %s != batched %s", i, a, b)
					}
				}
				if i == steps/2 {
					restored = New(Options{})
					if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, single)))); err != nil {
						t.Fatalf("restore: %v", err)
					}
					if a, b := digestOf(t, single), digestOf(t, restored); a != b {
						t.Fatalf("restored digest %s != %s", b, a)
					}
					if version >= 3 {
						samePeek(t, g.queues, single, restored)
					}
				}
			}
			batched.ApplyBatch(pending)
			if a, b, c := digestOf(t, single), digestOf(t, batched), digestOf(t, restored); a != b || a != c {
				t.Fatalf("final digests differ: single %s batched %s restored %s", a, b, c)
			}
			if err := restored.Integrity().Verify(); err != nil {
				t.Fatal(err)
			}
			if version >= 3 {
				samePeek(t, g.queues, single, batched)
				samePeek(t, g.queues, single, restored)
			}
			ids := fmt.Sprint(single.Reader().Auth().Identities())
			if b, r := fmt.Sprint(batched.Reader().Auth().Identities()), fmt.Sprint(restored.Reader().Auth().Identities()); b != ids || r != ids {
				t.Fatalf("identities differ:\nsingle   %s\nbatched  %s\nrestored %s", ids, b, r)
			}
			switch {
			case version >= HandoverVersion && authDone != 0:
				t.Fatalf("version %d applied %d auth commands: from the handover they are the meta group's", version, authDone)
			case version >= AuthVersion && version < HandoverVersion && (authDone == 0 || authRefused == 0):
				t.Fatalf("%d auth commands applied, %d refused: the sequence does not exercise both", authDone, authRefused)
			case version < AuthVersion && (authDone != 0 || !single.Reader().Auth().Empty()):
				t.Fatalf("version %d applied %d auth commands (%s)", version, authDone, ids)
			}
		})
	}
}

func isAuthCommand(c *fsmv1.Command) bool {
	switch c.Op.(type) {
	case *fsmv1.Command_CreateToken, *fsmv1.Command_RevokeToken, *fsmv1.Command_AuthGrant, *fsmv1.Command_AuthUngrant:
		return true
	}
	return false
}

func isPauseCommand(c *fsmv1.Command) bool {
	switch c.Op.(type) {
	case *fsmv1.Command_PauseQueue, *fsmv1.Command_ResumeQueue:
		return true
	}
	return false
}

// pausedGrants counts the grants of a grant result (carried by an ack
// or not) refused because their queue or key is paused.
func pausedGrants(res Result) int {
	gr, ok := res.(*GrantResult)
	if ag, carried := res.(*AckGrantResult); carried {
		gr, ok = ag.Granted, true
	}
	n := 0
	if ok && gr != nil {
		for _, err := range gr.Items {
			if errors.Is(err, ErrPaused) {
				n++
			}
		}
	}
	return n
}

// enqueueErrs joins the batch errors of an enqueue result (nil for any
// other result).
func enqueueErrs(res Result) error {
	r, ok := res.(*EnqueueResult)
	if !ok {
		return nil
	}
	errs := []error{r.Failure()}
	for _, b := range r.Batches {
		errs = append(errs, b.Err)
	}
	return errors.Join(errs...)
}

// samePeek fails unless a and b would deliver every queue's ready messages
// in the same order.
func samePeek(t *testing.T, queues []string, a, b *FSM) {
	t.Helper()
	ids := func(f *FSM, q string) []uint64 {
		ds, _ := f.Reader().Peek(q, 1<<20, false)
		out := make([]uint64, len(ds))
		for i, d := range ds {
			out[i] = d.ID
		}
		return out
	}
	for _, q := range queues {
		if x, y := ids(a, q), ids(b, q); !slices.Equal(x, y) {
			t.Fatalf("queue %s: delivery orders differ:\n%v\n%v", q, x, y)
		}
	}
}

func TestCheckpointDigestsAgree(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	for _, h := range []*harness{a, b} {
		h.create("q", nil)
		h.enqueuePayloads("q", "x", "y")
		h.mustOK(&fsmv1.Command{Op: &fsmv1.Command_Checkpoint{Checkpoint: &fsmv1.Checkpoint{}}})
	}
	da, err := a.f.Integrity().DigestAt(a.index)
	if err != nil {
		t.Fatal(err)
	}
	a.enqueuePayloads("q", "z") // moves on; the checkpoint digest must not
	db, err := b.f.Integrity().DigestAt(b.index)
	if err != nil {
		t.Fatal(err)
	}
	da2, _ := a.f.Integrity().DigestAt(b.index)
	if da != db || da2 != da {
		t.Fatalf("checkpoint digests %s %s %s", da, db, da2)
	}
	if _, err := a.f.Integrity().DigestAt(999); err == nil {
		t.Fatal("DigestAt of an unknown index succeeded")
	}
}

// FuzzDecodeCommand: any bytes in a log entry apply without a panic and
// leave the structures consistent.
func FuzzDecodeCommand(f *testing.F) {
	seedFSM := func(tb testing.TB) *FSM {
		h := newHarness(tb)
		h.create("q", nil)
		h.enqueuePayloads("q", "a", "b")
		return h.f
	}
	g := &cmdGen{r: rand.New(rand.NewPCG(1, 2)), f: seedFSM(f), now: 1_000_000, queues: []string{"q", "x"}}
	for range 64 {
		data, _ := Encode(g.next())
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := seedFSM(t)
		var fatal error
		fsm.fatal = func(err error) { fatal = err } // bytes may claim a newer log version
		_, before, _ := fsm.Integrity().Digest()
		res := fsm.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data}).(Result)
		if err := fsm.Integrity().Verify(); err != nil {
			t.Fatal(err)
		}
		if fatal != nil {
			if _, after, _ := fsm.Integrity().Digest(); after != before || !errors.Is(res.Failure(), ErrHalted) {
				t.Fatalf("an entry of a newer version changed the state or applied: %v", res.Failure())
			}
		}
	})
}

// FuzzRestore: a corrupt snapshot is refused (or restores something
// consistent) and never panics; a refused one leaves the state as it was.
func FuzzRestore(f *testing.F) {
	h := newHarness(f)
	h.create("q", nil)
	ids := h.enqueuePayloads("q", "a", "b", "c")
	h.grant("q", "c", 1000, ids[0])
	h.enqueue("q", &fsmv1.EnqueueMessage{DelayMs: 100, DedupId: "d"})
	s, _ := h.f.Snapshot()
	sink := &memSink{}
	_ = s.Persist(sink)
	f.Add(sink.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		target := New(Options{Fatal: func(error) {}}) // bytes may claim a newer version
		before, _, _ := target.Integrity().Digest()
		if err := target.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			if after, _, _ := target.Integrity().Digest(); after != before {
				t.Fatal("failed restore changed state")
			}
			return
		}
		if err := target.Integrity().Verify(); err != nil {
			t.Fatal(err)
		}
	})
}
