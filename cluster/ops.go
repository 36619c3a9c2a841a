package cluster

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
func (n *Node) await(ctx context.Context, op string, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return wrapRaftErr(op, err)
	case <-ctx.Done():
		return fmt.Errorf("cluster: %s: %w", op, ctx.Err())
	case <-n.raftDone:
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
func (n *Node) Apply(ctx context.Context, cmd []byte) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cluster: apply: %w", err)
	}
	if n.raft.State() != raft.Leader {
		if n.raft.State() == raft.Shutdown {
			return nil, ErrShutdown
		}
		return nil, ErrNotLeader
	}
	f := n.raft.Apply(cmd, enqueueTimeout(ctx))
	if err := n.await(ctx, "apply", f); err != nil {
		if n.spaceLogs.IsNoSpace(err) {
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
func (n *Node) Barrier(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: barrier: %w", err)
	}
	return n.await(ctx, "barrier", n.raft.Barrier(enqueueTimeout(ctx)))
}

// AppliedIndex returns the index of the last entry applied to the FSM here.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// RemoveNode removes server id from the Raft configuration (leader only).
// It overrides the failed-node grace period. Removing a voter that would
// leave fewer than BootstrapExpect voters fails with ErrBelowExpect unless
// force is set: the cluster was sized for that many, and the reconciler
// keeps that floor too. A node still alive in gossip is not re-added
// until it rejoins gossip (a restart). Errors: ErrNotLeader,
// ErrUnknownNode, ErrRemoveLeader, ErrBelowExpect.
func (n *Node) RemoveNode(ctx context.Context, id string, force bool) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == n.cfg.NodeID {
		return ErrRemoveLeader
	}
	for {
		// The check and the removal are one step: the removal names the
		// configuration it was checked against, and raft refuses it if
		// another change (the reconciler's) came in between.
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return wrapRaftErr("get configuration", err)
		}
		servers, index := f.Configuration().Servers, f.Index()
		voters, target := 0, (*raft.Server)(nil)
		for i, s := range servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
			if string(s.ID) == id {
				target = &servers[i]
			}
		}
		if target == nil {
			return fmt.Errorf("%w: %q", ErrUnknownNode, id)
		}
		if target.Suffrage == raft.Voter && voters-1 < n.cfg.BootstrapExpect && !force {
			return fmt.Errorf("%w: removing %s would leave %d voters, bootstrap-expect is %d",
				ErrBelowExpect, id, voters-1, n.cfg.BootstrapExpect)
		}
		n.ms.preventAdd(id)
		n.log.Info("removing server on request", "id", id, "force", force)
		err := n.await(ctx, "remove node "+id, n.raft.RemoveServer(raft.ServerID(id), index, enqueueTimeout(ctx)))
		if err == nil || ctx.Err() != nil {
			return err
		}
		if now := n.raft.GetConfiguration(); now.Error() != nil || now.Index() == index {
			return err
		}
		// The configuration moved on: decide again against the new one.
	}
}

// transferAttempts bounds how often TransferLeadership asks raft for a
// transfer that timed out: enough to ride out a slow election under
// load, few enough that a target that is down answers within about ten
// election timeouts.
const transferAttempts = 5

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
func (n *Node) TransferLeadership(ctx context.Context, toID string) (string, error) {
	if !n.IsLeader() {
		return "", ErrNotLeader
	}
	if toID == n.cfg.NodeID {
		return toID, nil
	}
	var target *raft.Server
	if toID != "" {
		servers, err := latestServers(n.raft)
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
		n.transferTries.Add(1)
		var f raft.Future
		if target == nil {
			f = n.raft.LeadershipTransfer()
		} else {
			f = n.raft.LeadershipTransferToServer(target.ID, target.Address)
		}
		err := n.await(ctx, "transfer leadership", f)
		if err == nil {
			break
		}
		if !transferRetryable(err) || attempt == transferAttempts {
			return "", err
		}
		// hashicorp/raft gives a transfer one election timeout, from the
		// catch-up to the target's win. On a loaded machine the target
		// often got TimeoutNow and wins its election just after: give it
		// one more election timeout to show up as leader before asking
		// again (a second TimeoutNow to a candidate does no harm).
		wctx, cancel := context.WithTimeout(ctx, n.cfg.ElectionTimeout)
		l, werr := n.WaitLeadership(wctx, func(l Leadership) bool {
			return l.LeaderID != "" && l.LeaderID != n.cfg.NodeID
		})
		cancel()
		if werr == nil {
			return l.LeaderID, nil
		}
		if ctx.Err() != nil || !n.IsLeader() {
			return "", err
		}
		n.log.Warn("leadership transfer timed out; trying again", "attempt", attempt, "to", toID, "err", err)
	}
	// The transfer succeeded once the target started its election; wait
	// until some other node is known as leader.
	l, err := n.WaitLeadership(ctx, func(l Leadership) bool {
		return l.LeaderID != "" && l.LeaderID != n.cfg.NodeID
	})
	if err != nil {
		return "", fmt.Errorf("cluster: transfer leadership: waiting for the new leader: %w", err)
	}
	newID := l.LeaderID
	return newID, nil
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
func (n *Node) Snapshot(ctx context.Context) (uint64, error) {
	f := n.raft.Snapshot()
	err := n.await(ctx, "snapshot", f)
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return 0, err
	}
	metas, lerr := n.snaps.List()
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
