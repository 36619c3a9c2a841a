package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/membership"
	"github.com/raftq/raftq/raftgroup"
)

// leaveProtocol takes the node out of the cluster on request (see
// DESIGN.md, "Stopping and leaving"): hand leadership over, announce the
// leave in gossip, and wait (bounded) to be taken out of the Raft
// configuration. A plain Shutdown never runs it: a stopped node stays a
// voter, so restarts never shrink the cluster.
type leaveProtocol struct {
	self string
	log  *slog.Logger
	r    groupRaft
	ms   *membership.Membership
	g    *raftgroup.Group
	// transfer hands leadership to the most up-to-date voter and returns
	// the new leader's id.
	transfer func(ctx context.Context) (string, error)
	// announce, with TLS, tells server id at addr over mutual TLS that
	// this node leaves: with TLS only such a leave removes a node at once.
	announce func(ctx context.Context, id, addr string) error

	mu   sync.Mutex
	left bool // the gossip leave was announced
	err  error
}

// handOver transfers leadership if this node leads and another voter can
// take it, bounded by ctx and leaveDrainTimeout; failures are logged.
func (p *leaveProtocol) handOver(ctx context.Context, why string) {
	if p.r.State() != raft.Leader || otherVoters(p.r, p.self) == 0 {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, leaveDrainTimeout)
	defer cancel()
	if id, err := p.transfer(tctx); err != nil {
		p.log.Warn("leadership transfer before "+why+" failed", "err", err)
	} else {
		p.log.Info("handed leadership over before "+why, "new_leader", id)
	}
}

// run leaves once; later calls return the first one's result. It returns
// nil once the node is out of the Raft configuration (or knows no leader
// that could still count it), else why not; the gossip leave has been
// announced either way, and gossip then keeps the node out of the
// configuration until it restarts.
func (p *leaveProtocol) run(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.left {
		return p.err
	}
	p.handOver(ctx, "leaving")

	timeout := leaveDrainTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if p.announce != nil {
		p.announceLeave(ctx, timeout)
	}
	p.ms.Leave(timeout)
	p.left = true

	// Wait (bounded) for the leader to take us out of the configuration,
	// so that a small cluster does not lose quorum for the removal.
	if p.r.State() != raft.Leader && otherVoters(p.r, p.self) > 0 {
		if err := p.waitRemoved(ctx); err != nil {
			p.err = fmt.Errorf("cluster: left gossip but not yet removed from the raft configuration: %w", err)
			p.log.Warn("left gossip but not yet removed from the raft configuration", "err", err)
		}
	}
	if p.err == nil {
		p.log.Info("left the cluster")
	}
	return p.err
}

// hasLeft reports whether the gossip leave was announced.
func (p *leaveProtocol) hasLeft() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left
}

// announceLeave tells every other server in the configuration, over
// mutual TLS, that this node leaves: whichever of them leads removes it.
func (p *leaveProtocol) announceLeave(ctx context.Context, timeout time.Duration) {
	servers, err := raftgroup.LatestServers(p.r)
	if err != nil {
		p.log.Warn("announcing leave: no configuration", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range servers {
		if string(s.ID) == p.self {
			continue
		}
		wg.Go(func() {
			if err := p.announce(ctx, string(s.ID), string(s.Address)); err != nil {
				p.log.Warn("announcing leave over mutual TLS", "to", s.ID, "err", err)
			}
		})
	}
	wg.Wait()
}

// waitRemoved waits until this node is out of the Raft configuration or
// knows no leader (the leader stopped replicating to it). Raft publishes no
// event when a follower's configuration changes, so the configuration is
// re-read on a short ticker; the loss of the leader wakes it at once.
func (p *leaveProtocol) waitRemoved(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		l := p.g.Leadership()
		servers, err := raftgroup.LatestServers(p.r)
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
