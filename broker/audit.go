package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/peers"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// Counter audit defaults: a rotation over 1,000 queues takes 16 ticks.
const (
	defaultAuditInterval = time.Second
	defaultAuditBudget   = 64
)

// AuditConfig tunes the leader's counter audit.
type AuditConfig struct {
	// Interval between audit ticks (0 = 1s; negative turns the audit off).
	Interval time.Duration
	// Budget is the most queues recounted per tick (0 = 64), so the cost
	// of a tick stays flat however many queues there are; a rotation over
	// every queue takes ceil(queues/Budget) ticks.
	Budget int
}

func (c AuditConfig) withDefaults() AuditConfig {
	if c.Interval == 0 {
		c.Interval = defaultAuditInterval
	}
	if c.Budget <= 0 {
		c.Budget = defaultAuditBudget
	}
	return c
}

// counterAudit is the counter audit, a node duty (leader.go): its own
// type, given at construction what it reads (the state's Reader and
// Integrity) and how it reaches the leader (the group's routing, its
// recount and the peer connections), so the group's type keeps none of
// its steps.
type counterAudit struct {
	cfg    AuditConfig
	log    *slog.Logger
	id     string // this node's, named in a follower's request
	reads  fsm.Reader
	checks fsm.Integrity
	peers  *peers.Pool // nil: a follower reports drift in its log only
	// route and recount are the group's (Broker.Route,
	// Operator.RecountQueues): where a leader-only call goes, and the
	// recount the established leader commits.
	route   func(ctx context.Context, wait time.Duration) (Route, error)
	recount func(ctx context.Context, queues []string) (*fsm.RecountResult, error)
	// audited counts the queues recounted (Stats.AuditedQueues).
	audited atomic.Uint64
}

// run is the audit: it runs on every node, for its lifetime (a node duty,
// leader.go). Counters are kept by one chokepoint (fsm/state put), so
// they should never drift; this finds it if they do. Each tick it
// recounts at most Budget of this node's queues, continuing from a cursor
// over the sorted queue names, and at the end of each rotation checks the
// node's byte total. Where a counter disagrees with the structures,
// RecountQueues is committed, which every replica applies by recounting
// its own structures (the command carries names, not numbers): the
// leader proposes it; a follower asks the leader to, through the routing
// any call takes (request). Every node audits its own counters
// because no other check sees a follower's: counters derive from the
// messages and are not in the state digest the replica check compares.
func (a *counterAudit) run(ctx context.Context, _ uint64) {
	cfg := a.cfg.withDefaults()
	if cfg.Interval < 0 {
		return
	}
	t := time.NewTimer(cfg.Interval)
	defer t.Stop()
	cursor := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		cursor = a.tick(ctx, cursor, cfg.Budget)
		t.Reset(auditWait(cfg.Interval, time.Since(began)))
	}
}

// auditPace is how many times its own duration the audit rests after a
// tick: it takes at most about 1/auditPace of a core. A tick's cost
// follows the messages of the queues it recounts, and one queue of a
// million messages takes tens of milliseconds, every Interval: on two
// cores that was the processor a client write's steps waited for
// (docs/benchmarks.md, issue 24, the quiet trace).
const auditPace = 50

// auditWait is the rest after a tick that took took: Interval, or
// auditPace times the tick when that is longer.
func auditWait(interval, took time.Duration) time.Duration {
	return max(interval, auditPace*took)
}

// tick audits the next budget queues after cursor and returns the
// cursor for the next tick ("" once the rotation is complete).
func (a *counterAudit) tick(ctx context.Context, cursor string, budget int) string {
	copies := a.checks.AuditCopies(cursor, budget)
	a.audited.Add(uint64(len(copies)))
	var drifted []string
	for _, c := range copies {
		have, want := c.Recount() // off the state lock: the trees are copies
		if !have.Equal(want) {
			a.log.Warn("counter audit: a queue's counters disagree with its messages",
				"queue", c.Queue, "counters", have.String(), "messages", want.String())
			drifted = append(drifted, c.Queue)
		}
	}
	next := ""
	if len(copies) == budget {
		next = copies[len(copies)-1].Queue
	}
	total := false
	if next == "" {
		if have, want := a.checks.BytesDrift(); have != want {
			a.log.Warn("counter audit: the node's byte total disagrees with the queues' byte counters", "total", have, "queues_sum", want)
			total = true
		}
	}
	if len(drifted) > 0 || total {
		a.repair(ctx, drifted)
	}
	return next
}

// repair has queues (and the byte total) recounted on every
// replica, once the cluster version has the command: the established
// leader proposes RecountQueues; any other node asks the leader to.
func (a *counterAudit) repair(ctx context.Context, queues []string) {
	if cv := a.reads.ClusterVersion(); cv < fsm.RecountVersion {
		a.log.Warn("counter audit: not repairing until every voter runs a build that can (cluster version too old)",
			"queues", queues, "cluster_version", cv, "needs", fsm.RecountVersion)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	local, err := a.request(rctx, queues)
	switch {
	case errors.Is(err, errNoPeers):
		a.log.Warn("counter audit: this follower cannot reach the leader to have its counters recounted; the next rotation tries again", "queues", queues)
	case err != nil && local:
		if ctx.Err() == nil {
			a.log.Warn("counter audit: recount not committed; the next rotation finds the drift again", "queues", queues, "err", err)
		}
	case err != nil:
		if ctx.Err() == nil {
			a.log.Warn("counter audit: the leader did not commit the recount this follower asked for; the next rotation finds the drift again", "queues", queues, "err", err)
		}
	case local:
		// This node's FSM logged each repair it made, with before and
		// after (RecountQueues logs the summary).
	default:
		// The recount applied here (or will, once this node catches up)
		// and this node's FSM logs the repair it made.
		a.log.Info("counter audit: the leader committed the recount this follower asked for", "queues", queues)
	}
}

// reportTimeout bounds a recount request, to the leader or here.
const reportTimeout = 10 * time.Second

// reportLeaderWait bounds how long a follower's recount request waits
// for a leader to be elected (as an API call waits, transport.Config's
// LeaderWait).
const reportLeaderWait = 3 * time.Second

// errNoPeers: this follower has no peer connections (Config.Peers is
// nil), so it cannot reach the leader.
var errNoPeers = errors.New("no peer connections to reach the leader")

// request has the leader commit RecountQueues for queues, routed
// as any leader-only call is (Route): on the established leader it
// commits the recount itself (local), elsewhere it asks the leader at its
// peer address (Config.Peers), as any node would through the Cluster
// API.
func (a *counterAudit) request(ctx context.Context, queues []string) (local bool, err error) {
	route, err := a.route(ctx, reportLeaderWait)
	if err != nil {
		return false, err
	}
	if route.Local {
		res, err := a.recount(ctx, queues)
		if err == nil {
			a.log.Info("counter audit: recount committed", "queues", queues, "repaired_here", len(res.Repairs), "byte_total_repaired_here", res.TotalBytesRepaired)
		}
		return true, err
	}
	if a.peers == nil {
		return false, errNoPeers
	}
	conn, err := a.peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return false, err
	}
	_, err = raftqv1.NewClusterClient(conn).RecountQueues(ctx, &raftqv1.RecountQueuesRequest{Queues: queues, ReportedBy: a.id})
	return false, err
}

// RecountQueues commits RecountQueues for queues on the leader: every
// replica recomputes those queues' counters (and the byte total) from its
// own messages. It fails with ErrNotLeader on a follower, and with
// ErrRecountUnsupported while the cluster version is older than the
// command.
func (o Operator) RecountQueues(ctx context.Context, queues []string) (*fsm.RecountResult, error) {
	if cv := o.b.reads.ClusterVersion(); cv < fsm.RecountVersion {
		return nil, fmt.Errorf("%w: cluster version %d, needs %d", ErrRecountUnsupported, cv, fsm.RecountVersion)
	}
	cmd := &fsmv1.Command{Op: &fsmv1.Command_RecountQueues{RecountQueues: &fsmv1.RecountQueues{Queues: queues}}}
	return fsm.As[*fsm.RecountResult](o.b.Propose(ctx, cmd))
}

// ErrRecountUnsupported: some voter runs a build without RecountQueues.
var ErrRecountUnsupported = errors.New("not every voter runs a build that can recount counters")
