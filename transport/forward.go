package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/raftq/raftq/cluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"github.com/raftq/raftq/transport/auth"
	"github.com/raftq/raftq/transport/broker"
	"github.com/raftq/raftq/transport/tlsconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// forwardedByKey marks a call forwarded from a follower; a node that gets
// one but is not the leader answers with a redirect instead of forwarding
// again, so a stale leader view cannot make calls loop.
const forwardedByKey = "raftq-forwarded-by"

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
// established leader, and otherwise sends them one hop to the leader with
// the caller's deadline. The route is decided once per call.
func (s *Server) forwardUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !leaderMethods[info.FullMethod] {
		resp, err := handler(ctx, req)
		return resp, toStatus(err)
	}
	return s.atLeader(ctx, info.FullMethod, req, handler)
}

// atLeader serves one call of a leader-only method: here, or forwarded.
func (s *Server) atLeader(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	route, err := s.route(ctx)
	if err != nil {
		return nil, err
	}
	if route.Local {
		resp, err := handler(ctx, req)
		if !isNotLeader(err) {
			return resp, toStatus(err)
		}
		if !errors.Is(err, cluster.ErrNotLeader) {
			// Leadership was lost with the outcome unknown: the client
			// decides whether to retry (at the leader named here).
			return nil, redirectError(s.b.Leader())
		}
		// Raft refused before appending anything: nothing happened here,
		// so the call may go to the new leader like any forwarded one.
		if route, err = s.route(ctx); err != nil {
			return nil, err
		}
		if route.Local {
			return nil, redirectError(s.b.Leader())
		}
	}
	return s.forward(ctx, route, method, req)
}

// forward sends a leader-only call one hop to the leader.
func (s *Server) forward(ctx context.Context, route broker.Route, method string, req any) (any, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedByKey)) > 0 {
		// Forwarded to us, but we do not lead (any more): one hop only.
		return nil, redirectError(route.LeaderID, route.LeaderClientAddr)
	}
	msgType, err := responseType(method)
	if err != nil {
		return nil, toStatus(err)
	}
	conn, err := s.peers.get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return nil, redirectError(route.LeaderID, route.LeaderClientAddr)
	}
	out := msgType.New().Interface()
	fctx := metadata.NewOutgoingContext(ctx, metadata.Pairs(forwardedByKey, s.b.ID()))
	if err := conn.Invoke(fctx, method, req.(proto.Message), out); err != nil {
		return nil, err
	}
	return out, nil
}

// route decides where a leader-only call is served, waiting up to
// LeaderWait (and the caller's deadline) for an election or a new
// leader's Barrier; NO_LEADER when none emerges.
func (s *Server) route(ctx context.Context) (broker.Route, error) {
	r, err := s.b.Route(ctx, s.cfg.LeaderWait)
	if err != nil {
		if ctx.Err() != nil {
			return broker.Route{}, toStatus(ctx.Err())
		}
		return broker.Route{}, redirectError("", "")
	}
	return r, nil
}

func isNotLeader(err error) bool {
	return errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, scheduler.ErrNotLeader)
}

// peerPool keeps one client connection per peer (node id and address).
// With TLS, a connection presents this node's certificate and accepts
// only the node certificate of the id it was made for, so a call is never
// forwarded to, nor a digest taken from, anything but that node.
type peerPool struct {
	tls    *tlsconfig.Source   // nil: plaintext
	auth   *auth.Authenticator // carries the caller's identity on every call
	mu     sync.Mutex
	conns  map[peerKey]*grpc.ClientConn
	closed bool // no connection is made after close (none would be closed)
}

type peerKey struct{ id, addr string }

func newPeerPool(src *tlsconfig.Source, a *auth.Authenticator) *peerPool {
	return &peerPool{tls: src, auth: a, conns: map[peerKey]*grpc.ClientConn{}}
}

func (p *peerPool) get(id, addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("peer %s: %w", id, errPeersClosed)
	}
	k := peerKey{id, addr}
	if c, ok := p.conns[k]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		if id == "" {
			return nil, fmt.Errorf("peer %s: node id unknown, cannot check its certificate", addr)
		}
		creds = credentials.NewTLS(p.tls.NodeClientConfig(id))
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(p.auth.ClientUnary),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRequestBytes), grpc.MaxCallSendMsgSize(MaxRequestBytes)))
	if err != nil {
		return nil, err
	}
	p.conns[k] = c
	return c, nil
}

// errPeersClosed: the node's server stopped.
var errPeersClosed = errors.New("the node's server is stopping")

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
}
