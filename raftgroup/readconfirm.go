package raftgroup

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// readConfirms coalesces the leadership confirmations of linearizable
// reads into log barriers.
//
// Why not raft's VerifyLeader: it counts a follower's answer to any
// heartbeat whose response it processes after the verification was
// registered, also one sent before the read arrived. A leader paused past
// the election timeout (SIGSTOP, a VM stall) finds its followers' answers
// to heartbeats sent before the pause waiting in its sockets when it
// resumes; they were given before the others elected a new leader, say
// "success" in the old term, and confirm a read that arrives in the same
// instant, which then answers from state missing a write the new leader
// acknowledged (a soak run's pause-read fault, seed 623300411983, read on
// n3 answered 1000012 after 1000013 was acknowledged through n1).
//
// A barrier is a log entry of this leader's term that commits only once a
// quorum stored it in that term: a follower that has moved on to a newer
// term refuses it, so an old leader cannot confirm itself from answers
// given before it was deposed. The barrier also waits until the FSM has
// applied everything before it, so the read sees every write acknowledged
// before it arrived. Reads that arrive while a barrier is in flight wait
// for the next one (started after they arrived), so a burst of reads
// costs one barrier per round trip, not one per read.
type readConfirms struct {
	mu      sync.Mutex
	waiters []chan error
	running bool
	closed  bool
	wg      sync.WaitGroup
}

// confirmRead waits for a barrier proposed after the call began to commit
// and be applied. A single voter is its own quorum: raft's VerifyLeader
// answers at once and no other leader can exist.
func (g *Group) confirmRead(ctx context.Context) error {
	if servers, err := LatestServers(g.raft); err == nil && voterCount(servers) == 1 {
		return g.await(ctx, "verify leader", g.raft.VerifyLeader())
	}
	rc := &g.reads
	ch := make(chan error, 1)
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		return ErrShutdown
	}
	rc.waiters = append(rc.waiters, ch)
	if !rc.running {
		rc.running = true
		rc.wg.Add(1)
		go g.runReadBarriers()
	}
	rc.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("cluster: verify leader: %w", ctx.Err())
	case <-g.raftDone:
		return ErrShutdown
	}
}

// runReadBarriers proposes one barrier per batch of waiting reads until
// none waits.
func (g *Group) runReadBarriers() {
	rc := &g.reads
	defer rc.wg.Done()
	for {
		rc.mu.Lock()
		batch := rc.waiters
		rc.waiters = nil
		if len(batch) == 0 {
			rc.running = false
			rc.mu.Unlock()
			return
		}
		rc.mu.Unlock()
		// No timeout of its own: each waiter's ctx bounds its wait, and
		// raft's shutdown ends the barrier.
		err := wrapRaftErr("verify leader", g.raft.Barrier(0).Error())
		for _, ch := range batch {
			ch <- err
		}
	}
}

// closeReads refuses new confirmations and waits for the barrier loop,
// which raft's shutdown ends.
func (g *Group) closeReads() {
	g.reads.mu.Lock()
	g.reads.closed = true
	g.reads.mu.Unlock()
	g.reads.wg.Wait()
}

func voterCount(servers []raft.Server) int {
	v := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}
