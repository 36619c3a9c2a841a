package raftgroup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// enqueueTimeout turns ctx's deadline into raft's enqueue timeout (0 = no
// limit).
func enqueueTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

// await waits for f, ctx, or the end of Raft, whichever is first. If ctx
// ends first the outcome is unknown. The helper goroutine ends when raft
// resolves the future (raft leaves futures still queued at its shutdown
// unresolved; callers are not held up by that).
func (g *Group) await(ctx context.Context, op string, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return wrapRaftErr(op, err)
	case <-ctx.Done():
		return fmt.Errorf("cluster: %s: %w", op, ctx.Err())
	case <-g.raftDone:
		select {
		case err := <-done:
			return wrapRaftErr(op, err)
		default:
			return ErrShutdown
		}
	}
}

// Apply proposes cmd to the replicated log and returns the FSM's response
// once it is applied on this node. The timeout comes from ctx's deadline.
// Errors: ErrNotLeader (nothing applied), ErrNoSpace (nothing applied), ErrLeadershipLost (outcome
// unknown), ErrShutdown, or ctx's error (outcome unknown if the command was
// already proposed). raft's own errors stay in the chain.
func (g *Group) Apply(ctx context.Context, cmd []byte) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: apply: %w", err)
	}
	if g.raft.State() != raft.Leader {
		if g.raft.State() == raft.Shutdown {
			return nil, ErrShutdown
		}
		return nil, ErrNotLeader
	}
	f := g.raft.Apply(cmd, enqueueTimeout(ctx))
	if err := g.await(ctx, "apply", f); err != nil {
		if g.spaceLogs.IsNoSpace(err) {
			// The leader could not append the entry: it reached no log
			// and raft has stepped this node down.
			return nil, fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		return nil, err
	}
	return f.Response(), nil
}

// Barrier waits until every entry committed before it is applied on this
// node (leader only).
func (g *Group) Barrier(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: barrier: %w", err)
	}
	return g.await(ctx, "barrier", g.raft.Barrier(enqueueTimeout(ctx)))
}

// AppliedIndex returns the index of the last entry applied to the FSM here.
func (g *Group) AppliedIndex() uint64 { return g.raft.AppliedIndex() }

// TermAt is the term of the entry at index: read from the log, or, once
// the log no longer holds it, the term of the oldest snapshot that covers
// it (the term of a later entry, so never below the entry's: what a
// restore from a backup at index needs, whose first leader must start a
// later term than the state remembers).
func (g *Group) TermAt(index uint64) (uint64, error) {
	var l raft.Log
	if err := g.spaceLogs.GetLog(index, &l); err == nil {
		return l.Term, nil
	}
	metas, err := g.snaps.List() // newest first
	if err != nil {
		return 0, fmt.Errorf("raftgroup: term at %d: %w", index, err)
	}
	for i := len(metas) - 1; i >= 0; i-- {
		if metas[i].Index >= index {
			return metas[i].Term, nil
		}
	}
	return 0, fmt.Errorf("raftgroup: term at %d: neither the log nor a snapshot holds it", index)
}

// transferAttempts bounds how often TransferLeadership asks raft for a
// transfer that timed out while this node still leads: enough to ride
// out a slow target under load, few enough that one that is down
// answers within about ten election timeouts.
const transferAttempts = 3

// transferRetryable is whether a transfer may still succeed if asked
// again: hashicorp/raft's timeout (a plain fmt error, not exported), or
// the previous attempt's clean-up still running (raft keeps "in
// progress" set until its TimeoutNow RPC returns, even after it answered
// the timeout).
func transferRetryable(err error) bool {
	return errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		strings.Contains(err.Error(), "leadership transfer timeout")
}

// TransferLeadership hands leadership to toID ("" = the most up-to-date
// voter) and returns the new leader's id once this node sees it (leader
// only). Transferring to itself is a no-op. A transfer that times out
// (the target slow to win its election) is asked for again, up to
// transferAttempts times within ctx.
func (g *Group) TransferLeadership(ctx context.Context, toID string) (string, error) {
	if !g.IsLeader() {
		return "", ErrNotLeader
	}
	if toID == g.cfg.NodeID {
		return toID, nil
	}
	term := g.raft.CurrentTerm()
	var target *raft.Server
	if toID != "" {
		servers, err := LatestServers(g.raft)
		if err != nil {
			return "", err
		}
		for i := range servers {
			if string(servers[i].ID) == toID {
				target = &servers[i]
			}
		}
		if target == nil {
			return "", fmt.Errorf("%w: %q", ErrUnknownNode, toID)
		}
	}
	for attempt := 1; ; attempt++ {
		g.transferTries.Add(1)
		var f raft.Future
		if target == nil {
			f = g.raft.LeadershipTransfer()
		} else {
			f = g.raft.LeadershipTransferToServer(target.ID, target.Address)
		}
		err := g.await(ctx, "transfer leadership", f)
		if err == nil {
			break
		}
		if !transferRetryable(err) {
			return "", err
		}
		g.transferTimeouts.Add(1)
		// hashicorp/raft gives a transfer one election timeout, from the
		// catch-up to the target's win. On a loaded machine the target
		// often got TimeoutNow and wins its election just after (this
		// node steps down when its vote request arrives): give it two
		// more election timeouts to show up as leader.
		wctx, cancel := context.WithTimeout(ctx, 2*g.cfg.ElectionTimeout)
		l, werr := g.WaitLeadership(wctx, func(l Leadership) bool {
			return l.LeaderID != "" && l.LeaderID != g.cfg.NodeID
		})
		cancel()
		if werr == nil {
			return l.LeaderID, nil
		}
		// Ask again only while this node still leads: one that stepped
		// down (it lost its quorum, as when the others stop) has nothing
		// to hand over.
		if ctx.Err() != nil || !g.IsLeader() || attempt == transferAttempts {
			return "", err
		}
		g.log.Warn("leadership transfer timed out; trying again", "attempt", attempt, "to", toID, "err", err)
	}
	// raft answers nil once this node has left its leader loop: the
	// target's vote request made it step down, or it lost its quorum (the
	// others stopped first, as at a cluster's shutdown). Wait until some
	// other node is known as leader; a node that campaigns again itself
	// (it heard of no leader for an election timeout) or leads in a later
	// term knows that nobody took over, and says so instead of waiting
	// out ctx.
	l, err := g.WaitLeadership(ctx, func(l Leadership) bool {
		return l.LeaderID != "" && l.LeaderID != g.cfg.NodeID ||
			l.Role == RoleCandidate || l.Role == RoleLeader && l.Term > term
	})
	if err != nil {
		return "", fmt.Errorf("cluster: transfer leadership: waiting for the new leader: %w", err)
	}
	if l.LeaderID == "" || l.LeaderID == g.cfg.NodeID {
		return "", ErrNoTakeover
	}
	return l.LeaderID, nil
}

// Snapshot takes a snapshot of this node's FSM now and returns the index it
// covers. If nothing was applied since the last snapshot, it returns that
// snapshot's index.
//
// The index is read from the store's list, not from the future's Open:
// Open reads the whole state file back to check its CRC, which for a 1 GiB
// snapshot is a second or more of disk and CPU taken from the write path.
// Raft takes one snapshot at a time, so the newest listed is this one or,
// if another finished meanwhile, a later one, which covers this index too.
func (g *Group) Snapshot(ctx context.Context) (uint64, error) {
	f := g.raft.Snapshot()
	err := g.await(ctx, "snapshot", f)
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return 0, err
	}
	metas, lerr := g.snaps.List()
	if lerr != nil {
		return 0, fmt.Errorf("cluster: snapshot: list: %w", lerr)
	}
	if len(metas) == 0 {
		if err != nil {
			return 0, err
		}
		return 0, errors.New("cluster: snapshot: taken but not listed")
	}
	return metas[0].Index, nil
}
