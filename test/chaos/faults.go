//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// The membership, clock-jump and pause-read faults (DESIGN.md, Nemesis).

// registerQueue is the pause-read fault's register: its max_depth, which
// only the nemesis writes, each write higher than the last. No message
// is ever enqueued to it.
const registerQueue = "chaos-register"

// registerBase keeps the register's values far above any default.
const registerBase = 1_000_000

// leaderAmong waits (up to timeout) for a leader that every running,
// unpaused node of among names and that is one of them.
func (nm *Nemesis) leaderAmong(ctx context.Context, among []*Node, timeout time.Duration) (*Node, error) {
	var l *Node
	err := harness.WaitFor(ctx, timeout, 100*time.Millisecond, func(ctx context.Context) error {
		leader := ""
		for _, n := range among {
			if !n.Running() || n.Paused() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := nm.c.Status(sctx, n)
			cancel()
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", n.ID, err)
			case st.LeaderId == "":
				return fmt.Errorf("%s knows no leader", n.ID)
			case leader != "" && st.LeaderId != leader:
				return fmt.Errorf("%s names %s, another %s", n.ID, st.LeaderId, leader)
			}
			leader = st.LeaderId
		}
		for _, n := range among {
			if n.ID == leader {
				l = n
				return nil
			}
		}
		return fmt.Errorf("leader %q is none of %v", leader, ids(among))
	})
	return l, err
}

// membership removes a follower while the leader is killed or a node is
// cut off, kills it, starts it again (on its old data dir, or an empty
// one) while the fault goes on, heals, and waits for every node to be a
// healthy voter again: the removed node must be re-admitted and disrupt
// nothing.
func (nm *Nemesis) membership(ctx context.Context, s Step, ev *FaultEvent) error {
	c := nm.c
	leader, err := nm.leader(ctx)
	if err != nil {
		return err
	}
	// The concurrent fault: kill the leader, or cut Perm's first node
	// (which may lead) from the rest.
	other := c.Nodes[s.Perm[0]]
	during := "cut " + other.ID
	if s.Leader {
		other, during = leader, "kill of leader "+leader.ID
	}
	var rest []*Node // who goes on serving during the fault
	for _, n := range c.Nodes {
		if n != other {
			rest = append(rest, n)
		}
	}
	if s.Leader {
		other.Kill()
	} else if err := nm.cut([]*Node{other}, rest); err != nil {
		return err
	}
	// The victim: the first other node in Perm that does not lead the
	// rest once they agree on a leader (RemoveNode refuses to remove the
	// leader).
	restLeader, err := nm.leaderAmong(ctx, rest, 20*time.Second)
	if err != nil {
		return fmt.Errorf("no leader during the %s: %w", during, err)
	}
	var victim *Node
	for _, i := range s.Perm {
		if n := c.Nodes[i]; victim == nil && n != other && n != restLeader {
			victim = n
		}
	}
	j := Rejoin{Node: victim.ID, During: during, FreshDir: s.FreshDir}
	ev.Targets = append(ev.Targets, victim.ID, other.ID)
	ev.Detail += fmt.Sprintf(" victim=%s %s", victim.ID, j.During)
	defer func() { nm.rec.Rejoin(j) }()

	// Remove the victim through the rest's leader (any node forwards it);
	// with three nodes the change commits only once the fault heals.
	j.RemoveAt = time.Now()
	if err := nm.removeNode(ctx, victim, rest); err != nil {
		j.Err = "remove: " + err.Error()
		nm.log.Warn("membership: remove did not answer success", "node", victim.ID, "err", err)
	} else {
		j.Removed = true
	}
	j.OutOfConfig = nm.outOfConfig(ctx, victim, rest)
	// The operator takes the removed node down, and (later) someone
	// starts it again, as it was or on a new disk.
	victim.Kill()
	// A new disk even when the removal did not commit: the empty node
	// must then refuse its vote (cluster/DESIGN.md, "Votes of an empty
	// node"); before it did, this elected a stale, cut-off node in a term
	// that already had a leader (DESIGN.md, "Membership").
	if j.FreshDir {
		if err := os.Rename(victim.DataDir, fmt.Sprintf("%s.removed-%d", victim.DataDir, time.Now().UnixNano())); err != nil {
			return fmt.Errorf("set %s's data dir aside: %w", victim.ID, err)
		}
	}
	_ = harness.Sleep(ctx, s.Hold/2)
	if err := victim.Launch(); err != nil {
		return err
	}
	_ = harness.Sleep(ctx, s.Hold-s.Hold/2)
	if err := nm.Heal(ctx); err != nil {
		return err
	}
	if _, err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		j.Err = strings.TrimPrefix(j.Err+"; rejoin: "+err.Error(), "; ")
		return fmt.Errorf("removed node %s not re-admitted as a voter: %w", victim.ID, err)
	}
	j.Voter = true
	return nil
}

// outOfConfig reports whether a node of via (asked in turn, within 5 s)
// no longer has n in its Raft configuration: the removal was appended,
// committed or not (with three nodes it commits only after the fault).
func (nm *Nemesis) outOfConfig(ctx context.Context, n *Node, via []*Node) bool {
	err := harness.WaitFor(ctx, 5*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		for _, v := range via {
			if v == n || !v.Running() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := nm.c.Status(sctx, v)
			cancel()
			if err != nil {
				continue
			}
			in := false
			for _, nd := range st.GetNodes() {
				in = in || (nd.GetId() == n.ID && (nd.GetSuffrage() == "voter" || nd.GetSuffrage() == "nonvoter"))
			}
			if !in {
				return nil
			}
		}
		return fmt.Errorf("%s still in the configuration", n.ID)
	})
	return err == nil
}

// removeNode asks the nodes in via (in turn, until one answers) to remove
// n, forced past the --bootstrap-expect floor, for up to 6 s (with three
// nodes it cannot commit while the fault lasts). A removal
// whose answer was lost and that applied is answered NOT_FOUND next time:
// done too.
func (nm *Nemesis) removeNode(ctx context.Context, n *Node, via []*Node) error {
	var last error
	_ = harness.WaitFor(ctx, 6*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		for _, v := range via {
			if v == n || !v.Running() {
				continue
			}
			cc, err := nm.c.Conn(v.GRPC)
			if err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			_, err = raftqv1.NewClusterClient(cc).RemoveNode(rctx, &raftqv1.RemoveNodeRequest{Id: n.ID, Force: true})
			cancel()
			if err == nil || (last != nil && status.Code(err) == codes.NotFound) {
				last = nil
				return nil
			}
			last = fmt.Errorf("via %s: %w", v.ID, err)
		}
		return last
	})
	return last
}

// clockJump: jump node x's clock while it runs (the broker must not
// notice), restart it on the jumped clock and make it leader, the same
// with the second offset, then back to the true clock (Heal). Every
// effective offset is recorded (History.Clocks) so the checker reads
// lease deadlines on the clock that set them.
func (nm *Nemesis) clockJump(ctx context.Context, s Step, ev *FaultEvent) error {
	x := nm.c.Nodes[s.Node]
	if s.Leader {
		var err error
		if x, err = nm.leader(ctx); err != nil {
			return err
		}
	}
	ev.Targets = append(ev.Targets, x.ID)
	for _, off := range []time.Duration{s.Offset, s.Offset2} {
		// A jump of the running node: the node logs it (proof it read it)
		// and, holding its clock steady, changes nothing it hands out.
		before := strings.Count(x.Log(), "test clock: wall clock jumped")
		if err := x.SetClockOffset(off); err != nil {
			return err
		}
		nm.rec.Clock(ClockChange{Node: x.ID, At: time.Now(), OffsetMs: off.Milliseconds(), Runtime: true})
		if err := harness.WaitFor(ctx, 10*time.Second, 50*time.Millisecond, func(context.Context) error {
			if strings.Count(x.Log(), "test clock: wall clock jumped") <= before {
				return fmt.Errorf("%s did not log the jump to %v", x.ID, off)
			}
			return nil
		}); err != nil {
			return err
		}
		_ = harness.Sleep(ctx, 500*time.Millisecond)
		// Started again, the node reads the jumped clock: its leases and
		// stamps are on it from now on.
		x.Kill()
		if err := nm.launchClocked(x, off); err != nil {
			return err
		}
		if _, err := nm.c.WaitHealthy(ctx, 60*time.Second); err != nil {
			return fmt.Errorf("after restarting %s %v off: %w", x.ID, off, err)
		}
		if err := nm.makeLeader(ctx, x); err != nil {
			return err
		}
		// It leads on its offset clock: stamps entries, grants, expires.
		_ = harness.Sleep(ctx, s.Hold/2)
	}
	return nil
}

// launchClocked starts n and records that its broker clock is off by
// off from now (nothing of the killed process is heard after it).
func (nm *Nemesis) launchClocked(n *Node, off time.Duration) error {
	nm.rec.Clock(ClockChange{Node: n.ID, At: time.Now(), OffsetMs: off.Milliseconds()})
	nm.mu.Lock()
	nm.clockOff[n.ID] = off
	nm.mu.Unlock()
	return n.Launch()
}

// healClocks puts every node back on the true clock: the file to zero,
// and a node started on an offset clock restarted.
func (nm *Nemesis) healClocks() error {
	var errs []error
	for _, n := range nm.c.Nodes {
		nm.mu.Lock()
		off, touched := nm.clockOff[n.ID]
		nm.mu.Unlock()
		if !touched {
			continue
		}
		if err := n.SetClockOffset(0); err != nil {
			errs = append(errs, err)
			continue
		}
		if off != 0 {
			n.Kill()
			errs = append(errs, nm.launchClocked(n, 0))
		} else {
			nm.mu.Lock()
			delete(nm.clockOff, n.ID)
			nm.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// makeLeader hands leadership to x (up to 20 s, a few tries: a transfer
// races the reconciler's promotions and elections).
func (nm *Nemesis) makeLeader(ctx context.Context, x *Node) error {
	return harness.WaitFor(ctx, 20*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		l, err := nm.c.Leader(ctx)
		if err != nil {
			return err
		}
		if l == x {
			return nil
		}
		cc, err := nm.c.Conn(l.GRPC)
		if err != nil {
			return err
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = raftqv1.NewClusterClient(cc).TransferLeadership(tctx, &raftqv1.TransferLeadershipRequest{ToId: x.ID})
		if err != nil {
			return fmt.Errorf("transfer to %s: %w", x.ID, err)
		}
		return errors.New("transferred; checking")
	})
}

// pauseRead: SIGSTOP the leader past the election timeout, write the
// register through the new leader, SIGCONT, and read at once through the
// old leader, linearizable and (to show the window) stale. The checker
// flags a linearizable read that missed the write (stale-read).
func (nm *Nemesis) pauseRead(ctx context.Context, s Step, ev *FaultEvent) error {
	if err := nm.ensureRegister(ctx); err != nil {
		return err
	}
	old, err := nm.leader(ctx)
	if err != nil {
		return err
	}
	ev.Targets = append(ev.Targets, old.ID)
	var rest []*Node
	for _, n := range nm.c.Nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	oldConn, err := nm.c.Conn(old.GRPC)
	if err != nil {
		return err
	}
	if err := old.Pause(); err != nil {
		return err
	}
	_ = harness.Sleep(ctx, s.Hold)
	leader, err := nm.leaderAmong(ctx, rest, 20*time.Second)
	if err != nil {
		return fmt.Errorf("no new leader while %s is paused: %w", old.ID, err)
	}
	nm.mu.Lock()
	nm.register++
	v := registerBase + nm.register
	nm.mu.Unlock()
	if err := nm.writeRegister(ctx, leader, v); err != nil {
		return err
	}
	if err := old.Resume(); err != nil {
		return err
	}
	// At once: both reads go out together, on a connection made before
	// the pause, before the old leader can have heard of the new term.
	var wg sync.WaitGroup
	for _, stale := range []bool{false, true} {
		wg.Go(func() { nm.readRegister(ctx, old, oldConn, stale) })
	}
	wg.Wait()
	// And once more, a moment later, linearizable.
	nm.readRegister(ctx, old, oldConn, false)
	ev.Detail += fmt.Sprintf(" wrote=%d via=%s", v, leader.ID)
	return nil
}

// ensureRegister creates the register queue once.
func (nm *Nemesis) ensureRegister(ctx context.Context) error {
	nm.mu.Lock()
	done := nm.registerMade
	nm.mu.Unlock()
	if done {
		return nil
	}
	err := harness.WaitFor(ctx, 20*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		l, err := nm.c.Leader(ctx)
		if err != nil {
			return err
		}
		cc, err := nm.c.Conn(l.GRPC)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = raftqv1.NewBrokerClient(cc).CreateQueue(cctx, &raftqv1.CreateQueueRequest{Name: registerQueue,
			Config: &raftqv1.QueueConfig{MaxDepth: registerBase}})
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create the register queue: %w", err)
	}
	nm.mu.Lock()
	nm.registerMade = true
	nm.mu.Unlock()
	return nil
}

// writeRegister sets the register to v through n, trying again (the
// same value) while no attempt answered: up to 15 s.
func (nm *Nemesis) writeRegister(ctx context.Context, n *Node, v int64) error {
	cc, err := nm.c.Conn(n.GRPC)
	if err != nil {
		return err
	}
	return harness.WaitFor(ctx, 15*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		op := PauseReadOp{Write: true, Node: n.ID, Value: v, Start: time.Now()}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := raftqv1.NewBrokerClient(cc).UpdateQueue(wctx, &raftqv1.UpdateQueueRequest{Name: registerQueue,
			Config: &raftqv1.QueueConfig{MaxDepth: v}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_depth"}}})
		cancel()
		op.End = time.Now()
		op.Outcome, op.Code = classify(err)
		if err != nil && op.Outcome == OK {
			op.Outcome = Unknown
		}
		nm.rec.Read(op)
		return err
	})
}

// readRegister reads the register on node n (no forwarding by the
// caller, no retry) and records what it answered.
func (nm *Nemesis) readRegister(ctx context.Context, n *Node, cc grpc.ClientConnInterface, stale bool) {
	op := PauseReadOp{Node: n.ID, Stale: stale, Start: time.Now()}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if stale {
		rctx = metadata.AppendToOutgoingContext(rctx, "raftq-read-consistency", "stale")
	}
	resp, err := raftqv1.NewBrokerClient(cc).GetQueue(rctx, &raftqv1.GetQueueRequest{Name: registerQueue})
	op.End = time.Now()
	if err != nil {
		// A refusal or a redirect: allowed; either way nothing was read.
		op.Outcome, op.Code = Failed, status.Code(err).String()
	} else {
		op.Outcome, op.Value = OK, resp.GetQueue().GetConfig().GetMaxDepth()
	}
	nm.rec.Read(op)
}
