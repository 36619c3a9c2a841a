package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/raftq/raftq/broker"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/raftq/raftq/raftgroup"
)

// forwardedByKey marks a call forwarded from a follower; a node that gets
// one but is not the leader answers with a redirect instead of forwarding
// again, so a stale leader view cannot make calls loop.
const forwardedByKey = "raftq-forwarded-by"

// readConsistencyKey is the metadata header by which a read chooses its
// consistency: absent or "linearizable" (the default), or "stale"
// (docs/api.md, Read consistency).
const readConsistencyKey = "raftq-read-consistency"

const (
	readLinearizable = "linearizable"
	readStale        = "stale"
)

// readMethods are the reads of replicated state a leader serves only
// after confirming its leadership (raftgroup.Group.VerifyLeader), so that no
// answer misses a write acknowledged before the call; with the stale
// header they skip it. ListConsumers reads what only the leader's
// scheduler holds, so even a stale one goes to the leader (unconfirmed).
var readMethods = map[string]bool{
	raftqv1.Broker_GetQueue_FullMethodName:      true,
	raftqv1.Broker_ListQueues_FullMethodName:    true,
	raftqv1.Broker_Peek_FullMethodName:          true,
	raftqv1.Broker_GetMessage_FullMethodName:    true,
	raftqv1.Broker_ListConsumers_FullMethodName: true,
}

// staleRead reads the read-consistency header of a call: true for stale;
// an unknown value, or more than one, is INVALID_ARGUMENT.
func staleRead(ctx context.Context) (bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(readConsistencyKey)
	switch {
	case len(vals) == 0:
		return false, nil
	case len(vals) > 1:
		return false, invalid("metadata %s: %d values, want one of %q, %q", readConsistencyKey, len(vals), readLinearizable, readStale)
	}
	switch vals[0] {
	case readLinearizable:
		return false, nil
	case readStale:
		return true, nil
	}
	return false, invalid("metadata %s: %q is not %q or %q", readConsistencyKey, vals[0], readLinearizable, readStale)
}

// leaderMethods are the unary methods only the leader serves; every other
// unary method (Cluster Status, Verify, Snapshot, LocalDigest, health,
// reflection) answers locally.
var leaderMethods = func() map[string]bool {
	m := map[string]bool{
		raftqv1.Cluster_RemoveNode_FullMethodName:         true,
		raftqv1.Cluster_TransferLeadership_FullMethodName: true,
		raftqv1.Cluster_Checkpoint_FullMethodName:         true,
		raftqv1.Cluster_SetClusterSettings_FullMethodName: true,
		raftqv1.Cluster_RecountQueues_FullMethodName:      true,
		raftqv1.Cluster_RepairCorrupt_FullMethodName:      true,
		raftqv1.Auth_CreateToken_FullMethodName:           true,
		raftqv1.Auth_RevokeToken_FullMethodName:           true,
		raftqv1.Auth_Grant_FullMethodName:                 true,
		raftqv1.Auth_Ungrant_FullMethodName:               true,
	}
	for name, md := range unaryMethods {
		if md.Parent().Name() == "Broker" {
			m[name] = true
		}
	}
	return m
}()

// unaryMethods maps the full name of each unary method of ours
// ("/raftq.v1.Broker/Enqueue") to its descriptor, built once so a
// forwarded call finds its response type without a scan.
var unaryMethods = func() map[string]protoreflect.MethodDescriptor {
	m := map[string]protoreflect.MethodDescriptor{}
	services := raftqv1.File_raftq_v1_raftq_proto.Services()
	for i := 0; i < services.Len(); i++ {
		svc := services.Get(i)
		for j := 0; j < svc.Methods().Len(); j++ {
			md := svc.Methods().Get(j)
			if !md.IsStreamingServer() && !md.IsStreamingClient() {
				m[fmt.Sprintf("/%s/%s", svc.FullName(), md.Name())] = md
			}
		}
	}
	return m
}()

// responseType finds the response message of a unary method of ours.
func responseType(fullMethod string) (protoreflect.MessageType, error) {
	md, ok := unaryMethods[fullMethod]
	if !ok {
		return nil, fmt.Errorf("unknown method %s", fullMethod)
	}
	return protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
}

// forwardUnary serves leader-only calls here when this node is the
// established leader of the call's group, and otherwise sends them one
// hop to that leader with the caller's deadline. The route is decided
// once per call.
func (s *Server) forwardUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isMetaTransfer(req) && s.metaActive() {
		// The meta group's leadership, handed over at its leader.
		return s.atMetaLeader(ctx, info.FullMethod, req, handler)
	}
	if resp, ok := s.placedStatus(req); ok {
		return resp, nil
	}
	if err := checkGroup(req); err != nil {
		return nil, err
	}
	if metaMethods[info.FullMethod] && s.metaActive() {
		return s.atMetaLeader(ctx, info.FullMethod, req, handler)
	}
	if !leaderMethods[info.FullMethod] {
		resp, err := handler(ctx, req)
		return resp, toStatus(err)
	}
	return s.atLeader(ctx, info.FullMethod, req, handler)
}

// atLeader serves one call of a leader-only method at the leader of its
// group (the queue's, route.go; the legacy group's for a call that names
// none): here, or forwarded. A read (readMethods) served here confirms
// leadership first, unless it asks for a stale answer. ListQueues, which
// spans every group, is listQueues'.
func (s *Server) atLeader(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	stale := false
	if readMethods[method] {
		var err error
		if stale, err = staleRead(ctx); err != nil {
			return nil, err
		}
	}
	if method == raftqv1.Broker_ListQueues_FullMethodName {
		return s.listQueues(ctx, req.(*raftqv1.ListQueuesRequest), handler, stale)
	}
	t, err := s.target(ctx, method, req)
	if err != nil {
		return nil, err
	}
	if stale {
		return s.serveStale(ctx, t, method, req, handler)
	}
	resp, err := s.serveAt(ctx, t, method, req, handler, readMethods[method])
	if err == nil && t.placeAt != nil {
		// Placed at meta's leader: this node's next call for the queue
		// must find the placement in its own replica.
		s.awaitPlaced(ctx, queueOf(req))
	}
	return resp, err
}

// serveStale serves a read called with the stale header: from this
// node's own replica of the group, leader or not, with no leadership
// check, except ListConsumers, which goes to the leader this node knows
// of (no other node has consumers) and is answered there unconfirmed. A
// node that knows its state diverged from the replicas' serves no read
// from it. A group this node holds no replica of is read at one that
// does (the stale header goes with the call).
func (s *Server) serveStale(ctx context.Context, t target, method string, req any, handler grpc.UnaryHandler) (any, error) {
	if method == raftqv1.Broker_ListConsumers_FullMethodName {
		return s.serveAt(ctx, t, method, req, handler, false)
	}
	if t.local == nil {
		return s.forwardAway(ctx, t, method, req)
	}
	g := t.local
	ctx = s.withGroup(ctx, g)
	if err := s.corruptStateError(); err != nil {
		return nil, err
	}
	if g.ops.Diverged() {
		id, addr := g.b.Leader()
		st := status.New(codes.Unavailable, "this node's state diverged from the replicas': it serves no reads until it is repaired; ask another node")
		if id != "" && addr != "" && id != g.b.ID() {
			st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonNotLeader, Domain: errorDomain,
				Metadata: map[string]string{"leader_id": id, "leader_addr": addr, "group": g.id}})
		}
		return nil, st.Err()
	}
	resp, err := handler(ctx, req)
	return resp, toStatus(err)
}

// serveAt serves a call at t's leader: here when this node leads t's
// group (confirm makes it wait for VerifyLeader first), else forwarded
// one hop to the leader; for a group this node holds no replica of,
// forwardAway. A confirmation that fails changed nothing, so the call
// goes on to the new leader as after raftgroup.ErrNotLeader.
func (s *Server) serveAt(ctx context.Context, t target, method string, req any, handler grpc.UnaryHandler, confirm bool) (any, error) {
	if t.placeAt != nil {
		return s.forwardTo(ctx, t, *t.placeAt, method, req, true)
	}
	g := t.local
	if g == nil {
		return s.forwardAway(ctx, t, method, req)
	}
	route, err := s.routeIn(ctx, g)
	if err != nil {
		return nil, err
	}
	if route.Local {
		ctx := s.withGroup(ctx, g)
		var resp any
		if confirm {
			err = g.raft.VerifyLeader(ctx)
		}
		if err == nil {
			resp, err = handler(ctx, req)
		}
		if !isNotLeader(err) {
			return resp, toStatus(err)
		}
		if !errors.Is(err, raftgroup.ErrNotLeader) {
			// Leadership was lost with the outcome unknown: the client
			// decides whether to retry (at the leader named here).
			return nil, g.redirect()
		}
		// Raft refused before appending anything: nothing happened here,
		// so the call may go to the new leader like any forwarded one.
		if route, err = s.routeIn(ctx, g); err != nil {
			return nil, err
		}
		if route.Local {
			return nil, g.redirect()
		}
	}
	return s.forwardTo(ctx, t, route, method, req, false)
}

// forward sends a leader-only call one hop to the leader (the meta
// group's, meta.go).
func (s *Server) forward(ctx context.Context, route broker.Route, method string, req any, opts ...grpc.CallOption) (any, error) {
	return s.forwardTo(ctx, target{}, route, method, req, false, opts...)
}

// forwardTo sends a call one hop to route's node, for t's group: to its
// leader, or with relay to one of its replicas, which forwards it once
// more, to the leader it knows (forwardAway). The call carries this
// node's placement version (placementVersionKey), so a node with an
// older placement answers NOT_OWNER rather than act on it.
func (s *Server) forwardTo(ctx context.Context, t target, route broker.Route, method string, req any, relay bool, opts ...grpc.CallOption) (any, error) {
	if forwardedOnce(ctx) {
		// Forwarded to us, but we do not lead (any more): one hop only.
		return nil, groupRedirect(t.id, route.LeaderID, route.LeaderClientAddr)
	}
	msgType, err := responseType(method)
	if err != nil {
		return nil, toStatus(err)
	}
	conn, err := s.peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return nil, groupRedirect(t.id, route.LeaderID, route.LeaderClientAddr)
	}
	out := msgType.New().Interface()
	md := metadata.Pairs(forwardedByKey, s.legacy.b.ID())
	if readMethods[method] {
		if stale, _ := staleRead(ctx); stale {
			md.Set(readConsistencyKey, readStale)
		}
	}
	if t.version > 0 {
		md.Set(placementVersionKey, strconv.FormatUint(t.version, 10))
	}
	if t.list {
		md.Set(listGroupKey, t.id)
	}
	if relay {
		md.Set(relayKey, "1")
	}
	fctx := metadata.NewOutgoingContext(ctx, md)
	if err := conn.Invoke(fctx, method, req.(proto.Message), out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// forwardedOnce: the call was forwarded to this node as to a leader, so
// it may not go on (a relayed call, sent to a replica, may once).
func forwardedOnce(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedByKey)) > 0 && len(md.Get(relayKey)) == 0
}

func isNotLeader(err error) bool {
	return errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, scheduler.ErrNotLeader)
}
