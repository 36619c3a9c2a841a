package broker

import (
	"context"
	"errors"
	"time"

	"github.com/raftq/raftq/raftgroup"
)

// ErrNoLeader: no leader (with a known address) emerged within the wait.
var ErrNoLeader = errors.New("no leader elected yet")

// Route is where a leader-only call is served.
type Route struct {
	// Local: this node is the established leader; serve the call here.
	Local bool
	// LeaderID and LeaderAddr name the leader to forward to when the call
	// is not local; LeaderClientAddr is where a redirect sends the client
	// (the leader's --advertise-grpc-addr, else LeaderAddr).
	LeaderID, LeaderAddr, LeaderClientAddr string
}

// Route decides, once per call, where a call that only the leader may
// serve goes: here, when this node leads and its Barrier has completed (so
// it answers from a state holding every acknowledged write), or to the
// leader this node knows of. While an election is under way, or this node
// has just won one and is still applying the previous term's entries, it
// waits for the next leadership event, for at most wait and ctx.
func (b *Broker) Route(ctx context.Context, wait time.Duration) (Route, error) {
	var timeout <-chan time.Time
	for {
		l := b.group.Leadership()
		switch {
		case l.Role == raftgroup.RoleLeader && l.Established:
			return Route{Local: true, LeaderID: b.id}, nil
		case l.Role == raftgroup.RoleShutdown:
			return Route{}, raftgroup.ErrShutdown
		case l.Role != raftgroup.RoleLeader && l.LeaderKnown() && l.LeaderGRPCAddr != "":
			return Route{LeaderID: l.LeaderID, LeaderAddr: l.LeaderGRPCAddr, LeaderClientAddr: l.LeaderClientAddr}, nil
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-l.Changed:
		case <-ctx.Done():
			return Route{}, ctx.Err()
		case <-timeout:
			return Route{}, ErrNoLeader
		}
	}
}

// Leader is the leader this node knows of right now, for a redirect that
// must not wait: its id and where clients reach it, "" when none is known.
func (b *Broker) Leader() (id, clientAddr string) {
	l := b.group.Leadership()
	return l.LeaderID, l.LeaderClientAddr
}
