package raftgroup

import (
	"context"
	"errors"
	"time"
)

// ErrNoLeader: no leader (with a known address) emerged within the wait.
var ErrNoLeader = errors.New("no leader elected yet")

// Route is where a call only a group's leader may serve goes.
type Route struct {
	// Local: this node is the established leader; serve the call here.
	Local bool
	// LeaderID and LeaderAddr name the leader to forward to when the call
	// is not local; LeaderClientAddr is where a redirect sends the client
	// (the leader's --advertise-grpc-addr, else LeaderAddr).
	LeaderID, LeaderAddr, LeaderClientAddr string
}

// RouteTo decides, once per call, where a call that only g's leader may
// serve goes: here, when this node leads and its Barrier has completed (so
// it answers from a state holding every acknowledged write), or to the
// leader this node knows of. While an election is under way, or this node
// has just won one and is still applying the previous term's entries, it
// waits for the next leadership event, for at most wait and ctx. One
// function for every group, so the data and meta groups route alike.
func RouteTo(ctx context.Context, g *Group, wait time.Duration) (Route, error) {
	var timeout <-chan time.Time
	for {
		l := g.Leadership()
		switch {
		case l.Role == RoleLeader && l.Established:
			return Route{Local: true, LeaderID: g.cfg.NodeID}, nil
		case l.Role == RoleShutdown:
			return Route{}, ErrShutdown
		case l.Role != RoleLeader && l.LeaderKnown() && l.LeaderGRPCAddr != "":
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
