package transport

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Routing a queue's call across data groups (issue 22): queue → group
// (meta's placement, read from this node's replica) → this node's replica
// of the group if it runs one → that group's leadership. DESIGN.md, "A
// queue's call goes to its group's leader".

// Placements is what the edge reads of the meta group's placement: where
// a queue is placed, which data groups there are with their replicas,
// and the members' API addresses. Every answer is from this node's meta
// replica, which only moves forward: the placement version a Lookup
// answers with never falls, and Await sees every change. *meta.FSM is
// it; tests give a fake.
type Placements interface {
	// Lookup is where queue is placed and the placement version of the
	// state the answer is from.
	Lookup(queue string) (p meta.Placement, ok bool, version uint64)
	// Group is one data group.
	Group(id string) (*meta.Group, bool)
	// Groups lists the data groups by id and the legacy group's id.
	Groups() (groups []*meta.Group, legacy string)
	// Members lists the members by node id.
	Members() []meta.Member
	// Await waits until cond holds of the state, or ctx ends; it
	// reports whether cond held.
	Await(ctx context.Context, cond func() bool) bool
}

// GossipLeaders is Config.Leaders over membership: the node gossip says
// leads a group (leader: node id and API address) and the addresses it
// gives nodes and clients (addrs).
func GossipLeaders(leader func(id string) (nodeID, addr string, ok bool), addrs func(nodeID string) (grpc, client string, ok bool)) func(id string) (broker.Route, bool) {
	return func(id string) (broker.Route, bool) {
		nid, addr, ok := leader(id)
		if !ok || addr == "" {
			return broker.Route{}, false
		}
		r := broker.Route{LeaderID: nid, LeaderAddr: addr, LeaderClientAddr: addr}
		if _, client, ok := addrs(nid); ok && client != "" {
			r.LeaderClientAddr = client
		}
		return r, true
	}
}

// Placer places a new queue before it is created (at meta's leader), on
// requestedGroup when one is named, with its dead-letter queue's group
// when dlq names an existing queue, else on the least loaded group; a
// retry answers as the first did. It answers the group and the placement
// version that holds the placement.
type Placer interface {
	PlaceQueue(ctx context.Context, queue, dlq, requestedGroup string) (group string, version uint64, err error)
}

const (
	// placementVersionKey carries the sender's placement version on a
	// forwarded call; a node whose placement is older waits a moment for
	// its meta replica, then answers NOT_OWNER.
	placementVersionKey = "raftq-placement-version"
	// relayKey marks a call sent to a replica of a group (not to its
	// leader) by a node that holds none: the replica may forward it once
	// more, to the group's leader.
	relayKey = "raftq-relay"
	// listGroupKey restricts a forwarded ListQueues to one group's
	// queues: the node that fans a listing out asks each group's leader
	// for its part.
	listGroupKey = "raftq-list-group"
	// placementCatchUp bounds the wait for this node's meta replica to
	// reach a caller's placement version.
	placementCatchUp = time.Second
)

// target is the group a call is served against.
type target struct {
	id      string     // the data group
	local   *dataGroup // this node's replica of it; nil when it runs none
	version uint64     // the placement version the choice is from (0: no meta)
	list    bool       // a ListQueues asking for this group's queues alone
	// placeAt: the call goes to meta's leader, which places the new
	// queue first and then sends it on to the chosen group's leader.
	placeAt *broker.Route
}

// placements is meta's placement as this node's replica holds it, nil
// while meta is not active (every queue is then the legacy group's).
func (s *Server) placements() Placements {
	if !s.metaActive() {
		return nil
	}
	if s.cfg.Placements != nil {
		return s.cfg.Placements
	}
	return s.cfg.Meta.FSM()
}

// localGroup is this node's replica of data group id, nil if it runs
// none. The legacy group is the one New was given; others come from the
// group manager, wrapped once per broker.
func (s *Server) localGroup(id string) *dataGroup {
	if id == s.legacy.id {
		return s.legacy
	}
	if s.cfg.Groups == nil {
		return nil
	}
	b, ok := s.cfg.Groups(id)
	if !ok {
		return nil
	}
	s.groupsMu.Lock()
	defer s.groupsMu.Unlock()
	if g := s.groups[id]; g != nil && g.b == b {
		return g
	}
	g := newDataGroup(id, b)
	s.groups[id] = g
	return g
}

// brokerMethod: a method of the Broker service, every one of which
// names a queue but ListQueues.
func brokerMethod(method string) bool {
	return strings.HasPrefix(method, "/raftq.v1.Broker/")
}

type queueNamer interface{ GetQueue() string }
type nameNamer interface{ GetName() string }

// queueOf is the queue a Broker request names.
func queueOf(req any) string {
	switch r := req.(type) {
	case queueNamer:
		return r.GetQueue()
	case nameNamer:
		return r.GetName()
	}
	return ""
}

// target resolves the group a leader-only call is served against: a
// Broker call's queue's, the legacy group's for the operator calls.
func (s *Server) target(ctx context.Context, method string, req any) (target, error) {
	if !brokerMethod(method) {
		return target{id: s.legacy.id, local: s.legacy}, nil
	}
	if c, ok := req.(*raftqv1.CreateQueueRequest); ok {
		return s.createTarget(ctx, c)
	}
	return s.queueTarget(ctx, queueOf(req))
}

// queueTarget resolves queue's group: where meta places it, the legacy
// group when meta places it nowhere or is not active. A caller whose
// placement is newer than this node's (placementVersionKey) waits for
// this node's replica to catch up, then gets NOT_OWNER.
func (s *Server) queueTarget(ctx context.Context, queue string) (target, error) {
	p := s.placements()
	want, err := callerPlacementVersion(ctx)
	if err != nil {
		return target{}, err
	}
	if p == nil {
		if want > 0 {
			return target{}, notOwnerError("this node's meta group is not active yet: its placement is older than the caller's", "", 0)
		}
		return target{id: s.legacy.id, local: s.legacy}, nil
	}
	pl, ok, v := p.Lookup(queue)
	if want > v {
		if pl, ok, v = s.awaitPlacement(ctx, p, queue, want); want > v {
			return target{}, notOwnerError("this node's placement (version "+strconv.FormatUint(v, 10)+") is older than the caller's ("+strconv.FormatUint(want, 10)+"): retry", "", v)
		}
	}
	id := s.legacy.id
	if ok {
		id = pl.Group
	}
	return s.groupTarget(p, queue, id, v)
}

// groupTarget is the target for data group id (queue's, for the error):
// this node's replica, or a group meta knows of. A placement on a group
// no one runs is a clear FAILED_PRECONDITION, never a guess.
func (s *Server) groupTarget(p Placements, queue, id string, version uint64) (target, error) {
	t := target{id: id, version: version, local: s.localGroup(id)}
	if t.local != nil {
		return t, nil
	}
	if _, ok := p.Group(id); !ok {
		return target{}, status.Errorf(codes.FailedPrecondition, "queue %q is placed on data group %q, which this cluster does not run (placement version %d)", queue, id, version)
	}
	return t, nil
}

// awaitPlacement waits (placementCatchUp at most, and ctx) until this
// node's replica reaches placement version want, and answers queue's
// placement then.
func (s *Server) awaitPlacement(ctx context.Context, p Placements, queue string, want uint64) (meta.Placement, bool, uint64) {
	ctx, cancel := context.WithTimeout(ctx, placementCatchUp)
	defer cancel()
	p.Await(ctx, func() bool {
		_, _, v := p.Lookup(queue)
		return v >= want
	})
	return p.Lookup(queue)
}

// awaitPlaced waits (metaCatchUp at most) until this node's meta replica
// places queue.
func (s *Server) awaitPlaced(ctx context.Context, queue string) {
	p := s.placements()
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, metaCatchUp)
	defer cancel()
	if !p.Await(ctx, func() bool { _, ok, _ := p.Lookup(queue); return ok }) {
		s.log.Warn("this node's meta replica does not place a queue created through it yet; answering anyway", "queue", queue)
	}
}

// callerPlacementVersion is the placement version a forwarded call
// carries (0: none).
func callerPlacementVersion(ctx context.Context) (uint64, error) {
	// Not FromIncomingContext: that copies every header, on every call.
	vals := metadata.ValueFromIncomingContext(ctx, placementVersionKey)
	if len(vals) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseUint(vals[0], 10, 64)
	if err != nil || len(vals) > 1 {
		return 0, invalid("metadata %s: %q is not one placement version", placementVersionKey, vals)
	}
	return v, nil
}

// forwardAway sends a call for a group this node runs no replica of:
// to its leader as gossip names it, else to one of its replicas (meta's
// record), marked so that it forwards it on to the leader it knows. A
// call forwarded here as to a leader goes no further (this node's view
// of the group is not the sender's: NOT_OWNER); one relayed here (to be
// placed at meta's leader, or as to a replica) goes on once, to the
// leader gossip names, and is not relayed again, so no call wanders.
func (s *Server) forwardAway(ctx context.Context, t target, method string, req any) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	forwarded, relayed := len(md.Get(forwardedByKey)) > 0, len(md.Get(relayKey)) > 0
	noReplica := func() error {
		return notOwnerError("this node runs no replica of data group "+t.id+": ask another node", t.id, t.version)
	}
	if forwarded && !relayed {
		return nil, noReplica()
	}
	if s.cfg.Leaders != nil {
		if r, ok := s.cfg.Leaders(t.id); ok && r.LeaderAddr != "" {
			return s.forwardTo(ctx, t, r, method, req, false)
		}
	}
	if relayed {
		return nil, noReplica()
	}
	r, ok := s.someReplica(t.id)
	if !ok {
		return nil, groupRedirect(t.id, "", "")
	}
	return s.forwardTo(ctx, t, r, method, req, true)
}

// someReplica is a replica of group id other than this node with an API
// address in meta's record, the first by node id.
func (s *Server) someReplica(id string) (broker.Route, bool) {
	p := s.placements()
	if p == nil {
		return broker.Route{}, false
	}
	g, ok := p.Group(id)
	if !ok {
		return broker.Route{}, false
	}
	self := s.legacy.b.ID()
	for _, m := range p.Members() {
		if m.NodeID != self && m.APIAddr != "" && slices.Contains(g.Replicas, m.NodeID) {
			return broker.Route{LeaderID: m.NodeID, LeaderAddr: m.APIAddr, LeaderClientAddr: m.APIAddr}, true
		}
	}
	return broker.Route{}, false
}

// leaseTarget decides a Lease stream's node: this node when it leads the
// queue's group, else NOT_LEADER naming the group's leader (this node's
// replica's view, or gossip's for a group it runs none of), NO_LEADER
// when none is known. Streams are never forwarded.
func (s *Server) leaseTarget(ctx context.Context, queue string) (*dataGroup, error) {
	g, route, err := s.queueRoute(ctx, queue)
	if err != nil {
		return nil, err
	}
	if !route.Local {
		return nil, groupRedirect(route.group, route.LeaderID, route.LeaderClientAddr)
	}
	return g, nil
}

// groupRoute is a broker.Route for a named group.
type groupRoute struct {
	broker.Route
	group string
}

// queueRoute is where queue's group is led: here (Local, with this
// node's replica g), at the leader this node's replica knows, or at the
// one gossip names for a group this node runs no replica of; NO_LEADER
// (naming the group) when none is known.
func (s *Server) queueRoute(ctx context.Context, queue string) (g *dataGroup, route groupRoute, err error) {
	t, err := s.queueTarget(ctx, queue)
	if err != nil {
		return nil, groupRoute{}, err
	}
	route.group = t.id
	if t.local == nil {
		if s.cfg.Leaders != nil {
			if r, ok := s.cfg.Leaders(t.id); ok && r.LeaderAddr != "" {
				route.Route = r
				return nil, route, nil
			}
		}
		return nil, route, groupRedirect(t.id, "", "")
	}
	route.Route, err = s.routeIn(ctx, t.local)
	return t.local, route, err
}

// groupCache is the dataGroup of each group the manager handed out.
type groupCache struct {
	groupsMu sync.Mutex
	groups   map[string]*dataGroup
}

// createTarget resolves a new queue's group. Without meta, or with one
// data group, it is the legacy group (or the one group), as before; a
// request naming another group is NOT_FOUND. With several, meta places
// the queue first (Placer, at meta's leader) and the queue is created on
// the group it chose; this node waits for its own replica to hold the
// placement, so a call through it right after the create finds the
// queue. A queue meta already places (a retry, or a create forwarded by
// the node that placed it) goes to that group again, and the group's own
// create answers a retry as the first (its idempotency key).
func (s *Server) createTarget(ctx context.Context, req *raftqv1.CreateQueueRequest) (target, error) {
	want, name := req.GetGroup(), req.GetName()
	if want != "" {
		if err := meta.ValidGroupID(want); err != nil {
			return target{}, invalid("group: %v", err)
		}
	}
	p := s.placements()
	if p == nil {
		if want != "" && want != s.legacy.id {
			return target{}, s.unknownGroup(want, nil)
		}
		return s.queueTarget(ctx, name) // the caller's version checked
	}
	t, err := s.queueTarget(ctx, name)
	if err != nil {
		return target{}, err
	}
	if pl, ok, _ := p.Lookup(name); ok && (want == "" || want == pl.Group) {
		return t, nil
	}
	groups, _ := p.Groups()
	if want != "" && want != s.legacy.id && !slices.ContainsFunc(groups, func(g *meta.Group) bool { return g.ID == want }) {
		return target{}, s.unknownGroup(want, groups)
	}
	if len(groups) <= 1 {
		// Nothing to choose: created where it routes today, and meta
		// places it there after the fact (its leader's reconciliation).
		if want != "" && want != t.id {
			return target{}, s.unknownGroup(want, groups)
		}
		return t, nil
	}
	if r, ok := s.placer().(placerRoute); ok {
		// Meta places at its leader: the create goes there first, marked
		// so that it may go on to the chosen group's leader.
		route, err := r.Route(ctx, s.cfg.LeaderWait)
		switch {
		case err != nil && ctx.Err() != nil:
			return target{}, toStatus(ctx.Err())
		case err != nil:
			return target{}, redirectError("", "")
		case !route.Local:
			if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedByKey)) > 0 {
				// Sent here as to meta's leader, or on from it: no further.
				return target{}, redirectError(route.LeaderID, route.LeaderClientAddr)
			}
			return target{id: t.id, version: t.version, placeAt: &route}, nil
		}
	}
	// The dead-letter queue the create makes with the queue, unless it
	// names one (fsm's default): placed with it, in the same log.
	dlq := req.GetConfig().GetDeadLetterQueue()
	if dlq == "" {
		dlq = name + ".dlq"
	}
	group, version, err := s.placer().PlaceQueue(ctx, name, dlq, want)
	if err != nil {
		return target{}, toStatus(err)
	}
	if _, _, v := s.awaitPlacement(ctx, p, name, version); v < version {
		s.log.Warn("this node's meta replica has not applied a placement it asked for yet; creating anyway", "queue", name, "group", group, "want", version, "applied", v)
	}
	return s.groupTarget(p, name, group, max(version, t.version))
}

// unknownGroup is the NOT_FOUND of a group this cluster does not run.
func (s *Server) unknownGroup(id string, groups []*meta.Group) error {
	ids := []string{s.legacy.id}
	for _, g := range groups {
		if !slices.Contains(ids, g.ID) {
			ids = append(ids, g.ID)
		}
	}
	slices.Sort(ids)
	return status.Errorf(codes.NotFound, "group %q: this cluster runs no such data group (it runs %s)", id, strings.Join(ids, ", "))
}

// placerRoute is a Placer that places only at its group's leader (the
// meta group): a create is forwarded there to be placed.
type placerRoute interface {
	Route(ctx context.Context, wait time.Duration) (broker.Route, error)
}

// placer is where new queues are placed: Config.Placer, else the legacy
// group alone (legacyPlacer).
func (s *Server) placer() Placer {
	if s.cfg.Placer != nil {
		return s.cfg.Placer
	}
	return legacyPlacer{s: s}
}

// legacyPlacer places every queue on the legacy group: what a node does
// until meta places queues itself (it is asked only when meta records
// more than one data group).
type legacyPlacer struct{ s *Server }

func (l legacyPlacer) PlaceQueue(_ context.Context, queue, _, requested string) (string, uint64, error) {
	if requested != "" && requested != l.s.legacy.id {
		return "", 0, status.Errorf(codes.FailedPrecondition, "queue %q: this node cannot place a queue on data group %q yet (it places every queue on %q)", queue, requested, l.s.legacy.id)
	}
	var v uint64
	if p := l.s.placements(); p != nil {
		_, _, v = p.Lookup(queue)
	}
	return l.s.legacy.id, v, nil
}
