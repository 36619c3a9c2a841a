package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// FaultKind names a nemesis action.
type FaultKind string

// The nemesis actions.
const (
	// KillRandom: kill -9 a random node, restart it after the hold.
	KillRandom FaultKind = "kill-random"
	// KillLeader: kill -9 the leader, restart it after the hold.
	KillLeader FaultKind = "kill-leader"
	// Pause: SIGSTOP a node (the leader half the time) for longer than the
	// election timeout, then SIGCONT.
	Pause FaultKind = "pause"
	// IsolateLeader: the leader loses every other node (iptables DROP).
	IsolateLeader FaultKind = "partition-leader"
	// SplitMajority: a random minority is cut from the majority.
	SplitMajority FaultKind = "partition-split"
	// Bridge: two sides that cannot see each other, and one node that
	// sees both.
	Bridge FaultKind = "partition-bridge"
	// PacketLoss: some nodes drop a share of incoming packets at random.
	PacketLoss FaultKind = "packet-loss"
	// Latency: Raft traffic to and from a node (or all) goes through a
	// delaying proxy.
	Latency FaultKind = "latency"
	// RollingRestart: every node in turn is stopped (SIGTERM) and started
	// again once the cluster is whole.
	RollingRestart FaultKind = "rolling-restart"
	// Membership: while the leader is killed (Leader) or a node is cut off
	// from the rest, a follower is removed (RemoveNode, forced), killed,
	// and started again on its old data dir (or, if FreshDir, an empty
	// one: a new member under its old name); it must be re-admitted as a
	// voter and disrupt nothing.
	Membership FaultKind = "membership"
	// ClockJump: one node's wall clock is jumped by Offset while it runs
	// (the broker must not notice), the node restarts on the jumped clock
	// and is made leader, then the same with Offset2 (the other way), then
	// back to the true clock (test-only --test-clock-offset-file).
	ClockJump FaultKind = "clock-jump"
	// PauseRead: the leader is paused (SIGSTOP) past the election timeout,
	// a write goes through the new leader, and at once after SIGCONT the
	// old leader is read: it must see the write or refuse/redirect.
	PauseRead FaultKind = "pause-read"
	// Corrupt: damage one node's newest wal segment or snapshot (bits
	// flipped, a range zeroed, the file cut short), while it runs (then
	// kill -9 and start it) or while it is stopped (SIGTERM, damage,
	// start); the node must find it, stay out of Raft, and be rebuilt
	// from its peers before the step ends.
	Corrupt FaultKind = "corrupt"
)

// damageKinds and damageFiles are what a corrupt step draws from (see
// harness.Damage).
var (
	damageKinds = []string{"flip", "zero", "truncate"}
	damageFiles = []string{"wal", "snapshot"}
)

// AllFaults lists every nemesis action.
var AllFaults = []FaultKind{KillRandom, KillLeader, Pause, IsolateLeader, SplitMajority, Bridge, PacketLoss, Latency, RollingRestart,
	Membership, ClockJump, PauseRead, Corrupt}

// ParseFaults reads a comma-separated list of fault kinds ("" or "all" =
// AllFaults).
func ParseFaults(s string) ([]FaultKind, error) {
	if s == "" || s == "all" {
		return AllFaults, nil
	}
	var out []FaultKind
	for _, f := range strings.Split(s, ",") {
		k := FaultKind(strings.TrimSpace(f))
		found := false
		for _, known := range AllFaults {
			found = found || k == known
		}
		if !found {
			return nil, fmt.Errorf("unknown fault %q (known: %v)", k, AllFaults)
		}
		out = append(out, k)
	}
	return out, nil
}

// Step is one scheduled fault. Node indexes refer to the cluster's nodes;
// "the leader" is resolved when the step runs.
type Step struct {
	Kind FaultKind `json:"kind"`
	// Node is the target for kill-random, pause (unless Leader), latency
	// (-1 = every link) and the bridge node of a bridge partition.
	Node int `json:"node"`
	// Leader targets the leader instead of Node (pause, clock-jump); for
	// membership, the concurrent fault is a leader kill, not a cut.
	Leader bool `json:"leader,omitempty"`
	// FreshDir: the removed node of a membership step comes back on an
	// empty data dir, not its old one.
	FreshDir bool `json:"fresh_dir,omitempty"`
	// Offset and Offset2 are a clock jump's two offsets of the node's
	// wall clock (opposite signs).
	Offset  time.Duration `json:"offset,omitempty"`
	Offset2 time.Duration `json:"offset2,omitempty"`
	// Perm orders the nodes: the minority of a split is Perm[:k], the
	// sides of a bridge come from it, the rolling restart follows it.
	Perm []int `json:"perm,omitempty"`
	// Minority is the size of a split's minority side.
	Minority int `json:"minority,omitempty"`
	// Prob is the drop probability of packet loss; Targets its nodes.
	Prob float64 `json:"prob,omitempty"`
	// Delay is the one-way delay added by a latency fault.
	Delay time.Duration `json:"delay,omitempty"`
	// Damage (flip, zero, truncate), File (wal, snapshot), Running and
	// Seed (the offsets) describe a corrupt step.
	Damage  string `json:"damage,omitempty"`
	File    string `json:"file,omitempty"`
	Running bool   `json:"running,omitempty"`
	Seed    uint64 `json:"seed,omitempty"`
	// Hold is how long the fault lasts; Quiet the calm after healing.
	Hold  time.Duration `json:"hold"`
	Quiet time.Duration `json:"quiet"`
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s hold=%v", s.Kind, s.Hold)
	switch s.Kind {
	case KillRandom:
		fmt.Fprintf(&b, " node=%d", s.Node)
	case Pause:
		if s.Leader {
			b.WriteString(" node=leader")
		} else {
			fmt.Fprintf(&b, " node=%d", s.Node)
		}
	case SplitMajority:
		fmt.Fprintf(&b, " minority=%v", s.Perm[:s.Minority])
	case Bridge:
		fmt.Fprintf(&b, " bridge=%d perm=%v", s.Node, s.Perm)
	case PacketLoss:
		fmt.Fprintf(&b, " nodes=%v p=%.2f", s.Perm[:s.Minority], s.Prob)
	case Latency:
		fmt.Fprintf(&b, " node=%d delay=%v", s.Node, s.Delay)
	case RollingRestart:
		fmt.Fprintf(&b, " order=%v", s.Perm)
	case Membership:
		with := "cut"
		if s.Leader {
			with = "leader-kill"
		}
		fmt.Fprintf(&b, " during=%s order=%v fresh_dir=%t", with, s.Perm, s.FreshDir)
	case ClockJump:
		node := fmt.Sprint(s.Node)
		if s.Leader {
			node = "leader"
		}
		fmt.Fprintf(&b, " node=%s offsets=%v,%v", node, s.Offset, s.Offset2)
	case Corrupt:
		fmt.Fprintf(&b, " node=%d %s %s running=%v", s.Node, s.Damage, s.File, s.Running)
	}
	return b.String()
}

// cost estimates a step's wall time, for fitting a plan into a duration.
func (s Step) cost(nodes int) time.Duration {
	overhead := 2 * time.Second // injection, heal, restarts
	switch s.Kind {
	case RollingRestart:
		overhead = time.Duration(nodes) * 6 * time.Second
	case Membership:
		overhead = 12 * time.Second // the removal, the rejoin, the promotion
	case ClockJump:
		overhead = 3 * 6 * time.Second // three restarts, two transfers
	case Corrupt:
		overhead = 15 * time.Second // found, removed, rebuilt, promoted
	}
	return s.Hold + s.Quiet + overhead
}

// Plan draws a fault schedule from seed: every kind once first (in a
// seeded order, so even a short run sees each), then kinds at random,
// until the estimated time reaches total. short draws briefer holds. The
// same arguments give the same plan.
func Plan(seed int64, nodes int, kinds []FaultKind, total time.Duration, short bool) []Step {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7261667471))
	// dur draws from [lo, hi], hi shrunk towards lo for short runs.
	dur := func(lo, hi time.Duration) time.Duration {
		if short {
			hi = lo + (hi-lo)/3
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)).Round(100*time.Millisecond)
	}
	var plan []Step
	var spent time.Duration
	order := append([]FaultKind(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i := 0; len(kinds) > 0; i++ {
		k := kinds[rng.IntN(len(kinds))]
		if i < len(order) {
			k = order[i]
		}
		s := Step{Kind: k, Node: rng.IntN(nodes), Perm: rng.Perm(nodes), Quiet: dur(time.Second, 3*time.Second)}
		switch k {
		case KillRandom, KillLeader:
			s.Hold = dur(500*time.Millisecond, 6*time.Second)
		case Pause:
			s.Leader = rng.IntN(2) == 0
			s.Hold = dur(1500*time.Millisecond, 6*time.Second) // election timeout is 1s
		case IsolateLeader, SplitMajority, Bridge:
			s.Hold = dur(3*time.Second, 10*time.Second)
			s.Minority = 1 + rng.IntN((nodes-1)/2)
			s.Node = s.Perm[nodes-1] // the bridge sees both sides
		case PacketLoss:
			s.Hold = dur(3*time.Second, 10*time.Second)
			s.Minority = 1 + rng.IntN(nodes)
			s.Prob = float64(5+rng.IntN(26)) / 100
		case Latency:
			s.Hold = dur(3*time.Second, 10*time.Second)
			if rng.IntN(3) == 0 {
				s.Node = -1
			}
			s.Delay = time.Duration(20+rng.IntN(281)) * time.Millisecond
		case RollingRestart:
			s.Hold = 0
		case Membership:
			s.Leader = rng.IntN(2) == 0
			s.FreshDir = rng.IntN(3) == 0
			s.Hold = dur(2*time.Second, 8*time.Second)
		case ClockJump:
			s.Leader = rng.IntN(2) == 0
			// Minutes, either way first; the second jump goes the other way.
			s.Offset = time.Duration(1+rng.IntN(10)) * time.Minute
			s.Offset2 = -time.Duration(1+rng.IntN(10)) * time.Minute
			if rng.IntN(2) == 0 {
				s.Offset, s.Offset2 = s.Offset2, s.Offset
			}
			s.Hold = dur(3*time.Second, 12*time.Second)
		case PauseRead:
			s.Hold = dur(1500*time.Millisecond, 5*time.Second) // past the 1 s election timeout
		case Corrupt:
			s.Hold = dur(500*time.Millisecond, 3*time.Second)
			s.Running = rng.IntN(2) == 0
			s.File = damageFiles[rng.IntN(len(damageFiles))]
			s.Damage = damageKinds[rng.IntN(len(damageKinds))]
			s.Seed = rng.Uint64()
		}
		if i >= len(order) && spent+s.cost(nodes) > total {
			break
		}
		plan = append(plan, s)
		spent += s.cost(nodes)
		if i >= len(order)-1 && spent >= total {
			break
		}
	}
	return plan
}
