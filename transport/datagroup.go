package transport

import (
	"context"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/raftgroup"
)

// dataGroup is one data group as the edge serves a call against it: the
// group's broker and the parts of it the handlers use. A Broker call is
// served against the group its queue is placed on (route.go), so the
// handlers take it per call (callGroup) rather than from the Server; the
// node-wide calls (Status, Verify, the HTTP port, metrics) use the legacy
// group's (Server.legacy), which also carries the node's membership.
type dataGroup struct {
	id     string
	b      *broker.Broker
	node   *cluster.Node    // b's, for status and admin operations: the legacy group's; nil for a placed group
	raft   *raftgroup.Group // b's Raft runtime: leadership, reads, snapshots
	state  fsm.Reader       // b's state, for reads and metrics
	checks fsm.Integrity    // b's state, for digests and verify
	ops    broker.Operator  // b's operator duties (backup, settings, repair)
	stats  broker.Stats     // b's counters, for metrics and status
}

func newDataGroup(id string, b *broker.Broker) *dataGroup {
	return &dataGroup{
		id:     id,
		b:      b,
		node:   b.Node(),
		raft:   b.Runtime().Group(),
		state:  b.State().Reader(),
		checks: b.State().Integrity(),
		ops:    b.Operator(),
		stats:  b.Stats(),
	}
}

// callGroupKey is the context key of the group a call is served against.
type callGroupKey struct{}

// withGroup is ctx serving a call against g. The legacy group is the
// default (callGroup), so a call against it carries nothing: one group
// costs no allocation per call.
func (s *Server) withGroup(ctx context.Context, g *dataGroup) context.Context {
	if g == s.legacy {
		return ctx
	}
	return context.WithValue(ctx, callGroupKey{}, g)
}

// callGroup is the group the router chose for this call (withGroup), the
// legacy group when it chose none.
func (s *Server) callGroup(ctx context.Context) *dataGroup {
	if g, ok := ctx.Value(callGroupKey{}).(*dataGroup); ok {
		return g
	}
	return s.legacy
}

// routeIn decides where a call only g's leader may serve goes, waiting up
// to LeaderWait (and the caller's deadline) for an election or a new
// leader's Barrier; NO_LEADER (naming the group) when none emerges.
func (s *Server) routeIn(ctx context.Context, g *dataGroup) (broker.Route, error) {
	r, err := g.b.Route(ctx, s.cfg.LeaderWait)
	if err != nil {
		if ctx.Err() != nil {
			return broker.Route{}, toStatus(ctx.Err())
		}
		return broker.Route{}, groupRedirect(g.id, "", "")
	}
	return r, nil
}

// route is routeIn for the legacy group: the operator calls that name no
// queue (Verify, Backup, the replica check's requests).
func (s *Server) route(ctx context.Context) (broker.Route, error) {
	return s.routeIn(ctx, s.legacy)
}

// redirect is NOT_LEADER naming the leader of g this node knows of right
// now (NO_LEADER when none), for a call that must not wait.
func (g *dataGroup) redirect() error {
	id, addr := g.b.Leader()
	return groupRedirect(g.id, id, addr)
}

// project is q as the API shows it, naming g as its group.
func (g *dataGroup) project(q *broker.Queue) *raftqv1.QueueInfo {
	qi := projectBrokerQueue(q)
	qi.Group = g.id
	return qi
}
