package broker

import (
	"context"
	"time"

	"github.com/raftq/raftq/raftgroup"
)

// ErrNoLeader: no leader (with a known address) emerged within the wait.
var ErrNoLeader = raftgroup.ErrNoLeader

// Route is where a leader-only call is served (raftgroup.Route).
type Route = raftgroup.Route

// Route decides, once per call, where a call that only the data group's
// leader may serve goes (raftgroup.RouteTo).
func (b *Broker) Route(ctx context.Context, wait time.Duration) (Route, error) {
	return raftgroup.RouteTo(ctx, b.group, wait)
}

// Leader is the leader this node knows of right now, for a redirect that
// must not wait: its id and where clients reach it, "" when none is known.
func (b *Broker) Leader() (id, clientAddr string) {
	l := b.group.Leadership()
	return l.LeaderID, l.LeaderClientAddr
}
