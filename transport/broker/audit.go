package broker

import (
	"context"
	"time"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
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

// auditCounters runs on the leader for its term. Counters are kept by one
// chokepoint (fsm/state put), so they should never drift; this finds it
// if they do. Each tick it recounts at most Budget queues, continuing from
// a cursor over the sorted queue names, and at the end of each rotation
// checks the node's byte total. Where a counter disagrees with the
// structures it proposes RecountQueues, which every replica applies by
// recounting its own structures (the command carries names, not numbers).
// Only the leader's counters are audited here; a follower's counter drift
// is what the replica check reports (replica.go).
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
		w.proposeRecount(ctx, drifted)
	}
	return next
}

// proposeRecount asks every replica to recount queues (and the byte
// total), once the cluster version has the command.
func (w *leaderWork) proposeRecount(ctx context.Context, queues []string) {
	if cv := w.state.ClusterVersion(); cv < fsm.RecountVersion {
		w.log.Warn("counter audit: not repairing until every voter runs a build that can (cluster version too old)",
			"queues", queues, "cluster_version", cv, "needs", fsm.RecountVersion)
		return
	}
	cmd := &fsmv1.Command{Op: &fsmv1.Command_RecountQueues{RecountQueues: &fsmv1.RecountQueues{Queues: queues}}}
	res, err := fsm.As[*fsm.RecountResult](w.propose(ctx, cmd))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("counter audit: recount not committed; the next rotation finds the drift again", "queues", queues, "err", err)
		}
		return
	}
	// This node's FSM logged each repair it made, with before and after.
	w.log.Info("counter audit: recount committed", "queues", queues, "repaired_here", len(res.Repairs), "byte_total_repaired_here", res.TotalBytesRepaired)
}
