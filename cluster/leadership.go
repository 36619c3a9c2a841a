package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// LeaderReady reports whether this node leads and has applied everything
// committed before its term (its Barrier completed): reads served now see
// every acknowledged write.
func (n *Node) LeaderReady() bool { return n.established.Load() && n.IsLeader() }

// Leader returns the current leader as this node knows it; ID is empty if
// no leader is known.
func (n *Node) Leader() LeaderInfo {
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return LeaderInfo{}
	}
	li := LeaderInfo{ID: string(id), RaftAddr: string(addr)}
	if meta, ok := n.memberMeta(li.ID); ok {
		li.GRPCAddr = meta.GRPC
	}
	return li
}

// WaitLeader blocks until a leader is known, together with its gossip
// metadata (so GRPCAddr is filled in when the leader advertises one), or
// until ctx ends.
func (n *Node) WaitLeader(ctx context.Context) (LeaderInfo, error) {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		changed := n.LeaderChanges()
		if li := n.Leader(); li.ID != "" {
			if _, ok := n.memberMeta(li.ID); ok {
				return li, nil
			}
		}
		select {
		case <-ctx.Done():
			return LeaderInfo{}, fmt.Errorf("cluster: wait for leader: %w", ctx.Err())
		case <-n.ctx.Done():
			return LeaderInfo{}, ErrShutdown
		case <-changed:
		case <-t.C: // gossip metadata may arrive after the leader is known
		}
	}
}

// LeaderChanges returns a channel that is closed at the next change of
// leader (including to "no leader") after the call; call it again for the
// change after that. Many goroutines may wait on it at once, and changes
// that happen between calls are coalesced. After Shutdown it returns a
// closed channel.
func (n *Node) LeaderChanges() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaderCh
}

func (n *Node) notifyLeaderChange() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.leaderCh)
	n.leaderCh = make(chan struct{})
}

// observeLoop consumes Raft observations: leader changes (for
// LeaderChanges) and the leader's heartbeat failures (for Status).
func (n *Node) observeLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case o := <-n.obsCh:
			switch d := o.Data.(type) {
			case raft.LeaderObservation:
				n.log.Info("leader changed", "leader", string(d.LeaderID), "leader_raft_addr", string(d.LeaderAddr))
				if string(d.LeaderID) != n.cfg.NodeID {
					n.mu.Lock()
					clear(n.hbFailed)
					n.mu.Unlock()
				}
				n.notifyLeaderChange()
			case raft.FailedHeartbeatObservation:
				n.mu.Lock()
				if _, ok := n.hbFailed[string(d.PeerID)]; !ok {
					n.hbFailed[string(d.PeerID)] = d.LastContact
				}
				n.mu.Unlock()
			case raft.ResumedHeartbeatObservation:
				n.mu.Lock()
				delete(n.hbFailed, string(d.PeerID))
				n.mu.Unlock()
			}
		}
	}
}

// leaderTerm is one stretch of leadership: the leader service and the
// reconciler run under ctx until it is cancelled.
type leaderTerm struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// leadershipLoop follows raft's LeaderCh. LeaderCh keeps only the latest
// value, so a true may hide a false before it: every true therefore ends
// the running term (if any) and starts a fresh one.
func (n *Node) leadershipLoop() {
	defer close(n.leaderLoopDone)
	var term *leaderTerm
	stop := func() {
		n.established.Store(false)
		if term != nil {
			term.cancel()
			<-term.done
			term = nil
		}
	}
	defer stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case isLeader := <-n.raft.LeaderCh():
			stop()
			if isLeader {
				term = n.startTerm()
			}
		}
	}
}

func (n *Node) startTerm() *leaderTerm {
	ctx, cancel := context.WithCancel(n.ctx)
	t := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		if !n.establishLeadership(ctx) {
			return
		}
		n.established.Store(true)
		var wg sync.WaitGroup
		if n.leader != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.log.Info("starting leader service")
				n.leader.RunLeader(ctx)
				n.log.Info("leader service stopped")
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.reconcileLoop(ctx)
		}()
		wg.Wait()
	}()
	return t
}

// establishLeadership issues a Barrier so that everything committed by
// earlier leaders is applied before the leader service starts (LeaderCh
// fires before the new leader's no-op commits). It retries transient
// failures while still leader and reports whether it succeeded.
func (n *Node) establishLeadership(ctx context.Context) bool {
	for {
		// The future resolves on commit, loss of leadership or shutdown;
		// waiting on it directly keeps no goroutine behind.
		err := n.raft.Barrier(0).Error()
		if err == nil {
			n.log.Info("gained leadership", "term", n.raft.CurrentTerm())
			return true
		}
		if ctx.Err() != nil || n.raft.State() != raft.Leader ||
			errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			n.log.Info("barrier on gaining leadership failed; not leading", "err", err)
			return false
		}
		n.log.Warn("barrier on gaining leadership failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}
