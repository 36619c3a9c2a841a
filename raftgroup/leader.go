package raftgroup

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Leadership returns this node's current leadership state. Wait on its
// Changed for the next one.
func (g *Group) Leadership() Leadership { return g.lead.get() }

// IsLeader reports whether this node is the Raft leader right now. It reads
// Raft's state directly; Leadership publishes the same transitions as
// events, one observation later.
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// LeaderReady reports whether this node leads and has applied everything
// committed before its term (its Barrier completed): reads served now see
// every acknowledged write.
func (g *Group) LeaderReady() bool { return g.Leadership().Established && g.IsLeader() }

// VerifyLeader confirms that this node still leads in the term it
// established: a barrier of that term proposed after the call began was
// committed by a quorum and applied here (readconfirm.go says why not
// raft's VerifyLeader, which an old leader can pass on answers given
// before it was deposed), and the term has not moved on. Local state read after it returns nil holds every write
// acknowledged before the call, also on a leader that was paused past the
// election timeout and has not yet heard that another was elected (its
// published Leadership still says it leads). It changes nothing, so a
// failure is plain ErrNotLeader (never an unknown outcome); before
// returning it waits (for at most ctx) until the published leadership no
// longer shows this term established, so the caller's next routing
// decision sees why. ctx's error when ctx ends first, ErrShutdown.
func (g *Group) VerifyLeader(ctx context.Context) error {
	l := g.Leadership()
	if l.Role != RoleLeader || !l.Established {
		return ErrNotLeader
	}
	g.verifies.Add(1)
	err := g.confirmRead(ctx)
	switch {
	case err == nil && g.raft.CurrentTerm() == l.Term:
		return nil
	case err == nil, errors.Is(err, ErrNotLeader), errors.Is(err, ErrLeadershipLost):
		stale := func(v Leadership) bool { return !v.Established || v.Term != l.Term }
		if _, werr := g.WaitLeadership(ctx, stale); werr != nil && !errors.Is(werr, ErrShutdown) {
			return werr
		}
		return fmt.Errorf("%w: leadership of term %d not confirmed", ErrNotLeader, l.Term)
	}
	return err
}

// WaitLeadership waits until cond holds for the published value and returns
// that value. It returns ctx's error (wrapped) if ctx ends first, and
// ErrShutdown once the node has stopped and cond does not hold for the
// final value. cond runs on the caller's goroutine and must not block.
func (g *Group) WaitLeadership(ctx context.Context, cond func(Leadership) bool) (Leadership, error) {
	for {
		l := g.Leadership()
		if cond(l) {
			return l, nil
		}
		if l.Role == RoleShutdown {
			return l, ErrShutdown
		}
		select {
		case <-ctx.Done():
			return l, fmt.Errorf("cluster: wait for leadership: %w", ctx.Err())
		case <-l.Changed:
		}
	}
}
