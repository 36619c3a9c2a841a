//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// Nemesis carries out a fault plan on a cluster, one step at a time,
// healing each step before the next and recording each as a FaultEvent.
type Nemesis struct {
	c   *Cluster
	rec *Recorder
	log *slog.Logger

	mu sync.Mutex
	// clockOff: the offset each node touched by a clock jump was last
	// started with (healClocks restarts those not at zero).
	clockOff map[string]time.Duration
	// register is the last value written to the pause-read register;
	// registerMade says its queue exists.
	register     int64
	registerMade bool
}

// NewNemesis returns a nemesis for c.
func NewNemesis(c *Cluster, rec *Recorder, log *slog.Logger) *Nemesis {
	return &Nemesis{c: c, rec: rec, log: log, clockOff: map[string]time.Duration{}}
}

// Run executes plan until it ends or ctx does. Steps after the first
// minSteps are skipped once stopAfter has passed.
func (nm *Nemesis) Run(ctx context.Context, plan []Step, minSteps int, stopAfter time.Time) {
	for i, s := range plan {
		if ctx.Err() != nil || (i >= minSteps && time.Now().After(stopAfter)) {
			return
		}
		ev := nm.step(ctx, s)
		nm.rec.Fault(ev)
		lvl := slog.LevelInfo
		if ev.Err != "" {
			lvl = slog.LevelWarn
		}
		nm.log.Log(ctx, lvl, "fault", "n", i+1, "of", len(plan), "kind", ev.Kind, "targets", ev.Targets, "detail", ev.Detail,
			"took", ev.End.Sub(ev.Start).Round(time.Millisecond), "err", ev.Err)
		_ = harness.Sleep(ctx, s.Quiet)
	}
}

func (nm *Nemesis) step(ctx context.Context, s Step) (ev FaultEvent) {
	ev = FaultEvent{Kind: s.Kind, Start: time.Now(), Detail: s.String()}
	defer func() {
		// Whatever happened, leave the cluster whole for the next step.
		if err := nm.Heal(ctx); err != nil {
			ev.Err = strings.TrimPrefix(ev.Err+"; heal: "+err.Error(), "; ")
		}
		ev.End = time.Now()
	}()
	err := nm.inject(ctx, s, &ev)
	if err != nil {
		ev.Err = err.Error()
	}
	return ev
}

func (nm *Nemesis) inject(ctx context.Context, s Step, ev *FaultEvent) error {
	c := nm.c
	nodes := c.Nodes
	targets := func(ns ...*Node) {
		for _, n := range ns {
			ev.Targets = append(ev.Targets, n.ID)
		}
	}
	switch s.Kind {
	case KillRandom, KillLeader:
		n := nodes[s.Node]
		if s.Kind == KillLeader {
			var err error
			if n, err = nm.leader(ctx); err != nil {
				return err
			}
		}
		targets(n)
		n.Kill()
		_ = harness.Sleep(ctx, s.Hold)
		return n.Launch()
	case Pause:
		n := nodes[s.Node]
		if s.Leader {
			var err error
			if n, err = nm.leader(ctx); err != nil {
				return err
			}
		}
		targets(n)
		if err := n.Pause(); err != nil {
			return err
		}
		_ = harness.Sleep(ctx, s.Hold)
		return n.Resume()
	case IsolateLeader:
		l, err := nm.leader(ctx)
		if err != nil {
			return err
		}
		targets(l)
		var rest []*Node
		for _, n := range nodes {
			if n != l {
				rest = append(rest, n)
			}
		}
		if err := nm.cut([]*Node{l}, rest); err != nil {
			return err
		}
		_ = harness.Sleep(ctx, s.Hold)
		return nil
	case SplitMajority:
		minority, majority := pick(nodes, s.Perm[:s.Minority]), pick(nodes, s.Perm[s.Minority:])
		targets(minority...)
		if err := nm.cut(minority, majority); err != nil {
			return err
		}
		_ = harness.Sleep(ctx, s.Hold)
		return nil
	case Bridge:
		// Perm's last node is the bridge; the others split in two halves
		// that see the bridge but not each other.
		others := s.Perm[:len(s.Perm)-1]
		half := (len(others) + 1) / 2
		a, b := pick(nodes, others[:half]), pick(nodes, others[half:])
		targets(nodes[s.Node])
		ev.Detail += fmt.Sprintf(" sides=%v|%v", ids(a), ids(b))
		if err := nm.cut(a, b); err != nil {
			return err
		}
		_ = harness.Sleep(ctx, s.Hold)
		return nil
	case PacketLoss:
		lossy := pick(nodes, s.Perm[:s.Minority])
		targets(lossy...)
		for _, n := range lossy {
			if err := c.Net.Lossy(ctx, n.Host, s.Prob); err != nil {
				return err
			}
		}
		_ = harness.Sleep(ctx, s.Hold)
		return nil
	case Latency:
		if s.Node >= 0 {
			targets(nodes[s.Node])
		}
		c.Proxy.SetDelay(s.Node, s.Delay)
		_ = harness.Sleep(ctx, s.Hold)
		return nil
	case RollingRestart:
		for _, i := range s.Perm {
			n := nodes[i]
			targets(n)
			if _, err := nm.c.WaitHealthy(ctx, 60*time.Second); err != nil {
				return fmt.Errorf("before restarting %s: %w", n.ID, err)
			}
			if err := n.Stop(20 * time.Second); err != nil {
				nm.log.Warn("node did not stop", "node", n.ID, "err", err)
			}
			if err := n.Launch(); err != nil {
				return err
			}
		}
		if _, err := nm.c.WaitHealthy(ctx, 60*time.Second); err != nil {
			return fmt.Errorf("after the rolling restart: %w", err)
		}
		return nil
	case Membership:
		return nm.membership(ctx, s, ev)
	case ClockJump:
		return nm.clockJump(ctx, s, ev)
	case PauseRead:
		return nm.pauseRead(ctx, s, ev)
	case Corrupt:
		return nm.corrupt(ctx, s, ev, nodes[s.Node])
	}
	return fmt.Errorf("unknown fault %q", s.Kind)
}

// corruptMarks are what a node logs when it finds its Raft state
// corrupt (raftgroup.Group.quarantine), or only its newest snapshot, which
// it sets aside when an older one and its log cover it
// (raftgroup.Group.setSnapshotAside).
var corruptMarks = []string{"this node's Raft state is corrupt", "the newest snapshot is corrupt: moved it aside"}

func countCorruptMarks(log string) (n int) {
	for _, m := range corruptMarks {
		n += strings.Count(log, m)
	}
	return n
}

// corrupt damages one node's newest wal segment or snapshot, stopped or
// running (then killed), starts it, and waits for it to have found the
// damage and to be back, rebuilt from its peers, as a healthy voter.
func (nm *Nemesis) corrupt(ctx context.Context, s Step, ev *FaultEvent, n *Node) error {
	ev.Targets = append(ev.Targets, n.ID)
	found := countCorruptMarks(n.Log())
	if !s.Running {
		if err := n.Stop(20 * time.Second); err != nil {
			nm.log.Warn("node did not stop", "node", n.ID, "err", err)
		}
	}
	path := harness.NewestSnapshotState(n.DataDir)
	if s.File == "wal" || path == "" {
		path = harness.NewestSegment(n.DataDir)
	}
	did, err := harness.Damage(path, s.Damage, rand.New(rand.NewPCG(s.Seed, 1)))
	if err != nil {
		return err // Heal starts the node again
	}
	ev.Detail += "; " + did
	_ = harness.Sleep(ctx, s.Hold)
	if s.Running {
		n.Kill()
	}
	_, statErr := os.Stat(path)
	if err := n.Launch(); err != nil {
		return err
	}
	if statErr != nil {
		// A snapshot the running node replaced, and reaped, in the hold:
		// the damage is gone with it.
		ev.Detail += "; the damaged file was gone before the restart"
	} else if err := harness.WaitFor(ctx, 30*time.Second, 200*time.Millisecond, func(context.Context) error {
		if countCorruptMarks(n.Log()) <= found {
			return fmt.Errorf("%s has not reported its damaged state", n.ID)
		}
		return nil
	}); err != nil {
		return err
	}
	if _, err := nm.c.WaitHealthy(ctx, 120*time.Second); err != nil {
		return fmt.Errorf("after damaging %s: %w", n.ID, err)
	}
	return nil
}

// Heal undoes every fault: nodes started and resumed, filters flushed,
// delays cleared, clocks true.
func (nm *Nemesis) Heal(ctx context.Context) error {
	var errs []error
	errs = append(errs, nm.healClocks())
	for _, n := range nm.c.Nodes {
		if n.Paused() {
			errs = append(errs, n.Resume())
		}
		if !n.Running() {
			errs = append(errs, n.Launch())
		}
	}
	nm.c.Proxy.SetDelay(-1, 0)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	errs = append(errs, nm.c.Net.FlushFilters(hctx))
	return errors.Join(errs...)
}

func (nm *Nemesis) cut(a, b []*Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, x := range a {
		for _, y := range b {
			if err := nm.c.Net.Cut(ctx, x.Host, y.Host); err != nil {
				return err
			}
		}
	}
	return nil
}

// leader waits (up to 20s) for an agreed leader.
func (nm *Nemesis) leader(ctx context.Context) (*Node, error) {
	var l *Node
	err := harness.WaitFor(ctx, 20*time.Second, 100*time.Millisecond, func(ctx context.Context) (err error) {
		l, err = nm.c.Leader(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("no leader to target: %w", err)
	}
	return l, nil
}

func pick(nodes []*Node, idx []int) []*Node {
	out := make([]*Node, len(idx))
	for i, j := range idx {
		out[i] = nodes[j]
	}
	return out
}

func ids(ns []*Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}
