package cluster

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
)

// leaveProtocol is the graceful part of Shutdown (see DESIGN.md, "Graceful
// shutdown"): hand leadership over, announce the leave in gossip, and wait
// (bounded) to be taken out of the Raft configuration. Failures are logged,
// not fatal: the node stops regardless.
type leaveProtocol struct {
	self string
	log  *slog.Logger
	r    *raft.Raft
	ms   *membership
	lead *leadership
	// transfer hands leadership to the most up-to-date voter and returns
	// the new leader's id.
	transfer func(ctx context.Context) (string, error)
}

func (p *leaveProtocol) run(ctx context.Context) {
	if p.r.State() == raft.Leader && otherVoters(p.r, p.self) > 0 {
		tctx, cancel := context.WithTimeout(ctx, leaveDrainTimeout)
		if id, err := p.transfer(tctx); err != nil {
			p.log.Warn("leadership transfer before leaving failed", "err", err)
		} else {
			p.log.Info("handed leadership over before leaving", "new_leader", id)
		}
		cancel()
	}

	timeout := leaveDrainTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	p.ms.leave(timeout)

	// Wait (bounded) for the leader to take us out of the configuration,
	// so that a small cluster does not lose quorum for the removal.
	if p.r.State() != raft.Leader && otherVoters(p.r, p.self) > 0 {
		wctx, cancel := context.WithTimeout(ctx, leaveDrainTimeout)
		err := p.waitRemoved(wctx)
		cancel()
		if err != nil {
			p.log.Warn("left gossip but not yet removed from the raft configuration", "err", err)
		}
	}
	if err := p.ms.shutdown(); err != nil {
		p.log.Warn("memberlist shutdown", "err", err)
	}
}

// waitRemoved waits until this node is out of the Raft configuration or
// knows no leader (the leader stopped replicating to it). Raft publishes no
// event when a follower's configuration changes, so the configuration is
// re-read on a short ticker; the loss of the leader wakes it at once.
func (p *leaveProtocol) waitRemoved(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		l := p.lead.get()
		servers, err := latestServers(p.r)
		if err != nil || !hasServer(servers, p.self) || l.LeaderID == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.Changed:
		case <-t.C:
		}
	}
}
