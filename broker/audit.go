package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftq/raftq/cluster"

	"github.com/raftq/raftq/fsm"
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

// auditCounters runs on every node, for its lifetime. Counters are kept
// by one chokepoint (fsm/state put), so they should never drift; this
// finds it if they do. Each tick it recounts at most Budget of this
// node's queues, continuing from a cursor over the sorted queue names,
// and at the end of each rotation checks the node's byte total. Where a
// counter disagrees with the structures, RecountQueues is committed,
// which every replica applies by recounting its own structures (the
// command carries names, not numbers): the leader proposes it; a
// follower asks the leader to (Broker.reportDrift). Every node audits its
// own counters because no other check sees a follower's: counters derive
// from the messages and are not in the state digest the replica check
// compares.
func (w *leaderWork) auditCounters(ctx context.Context) {
	cfg := w.audit.withDefaults()
	if cfg.Interval < 0 {
		return
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	cursor := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cursor = w.auditTick(ctx, cursor, cfg.Budget)
	}
}

// auditTick audits the next budget queues after cursor and returns the
// cursor for the next tick ("" once the rotation is complete).
func (w *leaderWork) auditTick(ctx context.Context, cursor string, budget int) string {
	copies := w.state.AuditCopies(cursor, budget)
	w.audited.Add(uint64(len(copies)))
	var drifted []string
	for _, c := range copies {
		have, want := c.Recount() // off the state lock: the trees are copies
		if !have.Equal(want) {
			w.log.Warn("counter audit: a queue's counters disagree with its messages",
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
		if have, want := w.state.BytesDrift(); have != want {
			w.log.Warn("counter audit: the node's byte total disagrees with the queues' byte counters", "total", have, "queues_sum", want)
			total = true
		}
	}
	if len(drifted) > 0 || total {
		w.repair(ctx, drifted)
	}
	return next
}

// repair has queues (and the byte total) recounted on every replica,
// once the cluster version has the command: the established leader
// proposes RecountQueues; any other node asks the leader to.
func (w *leaderWork) repair(ctx context.Context, queues []string) {
	if cv := w.state.ClusterVersion(); cv < fsm.RecountVersion {
		w.log.Warn("counter audit: not repairing until every voter runs a build that can (cluster version too old)",
			"queues", queues, "cluster_version", cv, "needs", fsm.RecountVersion)
		return
	}
	if l := w.node.Leadership(); l.Role == cluster.RoleLeader && l.Established {
		res, err := w.recount(ctx, queues)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("counter audit: recount not committed; the next rotation finds the drift again", "queues", queues, "err", err)
			}
			return
		}
		// This node's FSM logged each repair it made, with before and after.
		w.log.Info("counter audit: recount committed", "queues", queues, "repaired_here", len(res.Repairs), "byte_total_repaired_here", res.TotalBytesRepaired)
		return
	}
	if w.report == nil {
		w.log.Warn("counter audit: this follower cannot reach the leader to have its counters recounted; the next rotation tries again", "queues", queues)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	if err := w.report(rctx, queues); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("counter audit: the leader did not commit the recount this follower asked for; the next rotation finds the drift again", "queues", queues, "err", err)
		}
		return
	}
	// The recount applied here (or will, once this node catches up) and
	// this node's FSM logs the repair it made.
	w.log.Info("counter audit: the leader committed the recount this follower asked for", "queues", queues)
}

// reportTimeout bounds a follower's request to the leader for a recount.
const reportTimeout = 10 * time.Second

// DriftReporter asks the leader to commit RecountQueues for queues (an
// empty list: the byte total alone) and returns once it is committed.
type DriftReporter func(ctx context.Context, queues []string) error

// reportLeaderWait bounds how long a follower's recount request waits
// for a leader to be elected (as an API call waits, transport.Config's
// LeaderWait).
const reportLeaderWait = 3 * time.Second

// reportDrift is the follower's DriftReporter: it asks the leader, at its
// peer address (Config.Peers), to commit RecountQueues for queues, as any
// node would through the Cluster API. On the established leader it
// commits the recount itself.
func (b *Broker) reportDrift(ctx context.Context, queues []string) error {
	route, err := b.Route(ctx, reportLeaderWait)
	if err != nil {
		return err
	}
	if route.Local {
		_, err := b.RecountQueues(ctx, queues)
		return err
	}
	conn, err := b.cfg.Peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return err
	}
	_, err = raftqv1.NewClusterClient(conn).RecountQueues(ctx, &raftqv1.RecountQueuesRequest{Queues: queues, ReportedBy: b.id})
	return err
}

// RecountQueues commits RecountQueues for queues on the leader: every
// replica recomputes those queues' counters (and the byte total) from its
// own messages. It fails with ErrNotLeader on a follower, and with
// ErrRecountUnsupported while the cluster version is older than the
// command.
func (b *Broker) RecountQueues(ctx context.Context, queues []string) (*fsm.RecountResult, error) {
	if cv := b.state.ClusterVersion(); cv < fsm.RecountVersion {
		return nil, fmt.Errorf("%w: cluster version %d, needs %d", ErrRecountUnsupported, cv, fsm.RecountVersion)
	}
	return b.leader.recount(ctx, queues)
}

// ErrRecountUnsupported: some voter runs a build without RecountQueues.
var ErrRecountUnsupported = errors.New("not every voter runs a build that can recount counters")

func (w *leaderWork) recount(ctx context.Context, queues []string) (*fsm.RecountResult, error) {
	cmd := &fsmv1.Command{Op: &fsmv1.Command_RecountQueues{RecountQueues: &fsmv1.RecountQueues{Queues: queues}}}
	return fsm.As[*fsm.RecountResult](w.propose(ctx, cmd))
}
