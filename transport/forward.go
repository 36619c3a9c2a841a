package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/raftq/raftq/cluster"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/grpc"
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

// forwardUnary serves leader-only calls here when this node leads, and
// otherwise sends them one hop to the leader with the caller's deadline.
func (s *Server) forwardUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !leaderMethods[info.FullMethod] {
		resp, err := handler(ctx, req)
		return resp, toStatus(err)
	}
	for attempt := 0; ; attempt++ {
		if s.node.IsLeader() {
			if err := s.waitEstablished(ctx); err != nil {
				return nil, err
			}
			if !s.node.LeaderReady() {
				if attempt > 100 {
					return nil, redirectError("", "")
				}
				continue
			}
			resp, err := handler(ctx, req)
			if isNotLeader(err) && attempt == 0 {
				continue // lost leadership before proposing: forward instead
			}
			if isNotLeader(err) {
				li := s.node.Leader()
				return nil, redirectError(li.ID, li.GRPCAddr)
			}
			return resp, toStatus(err)
		}
		li, err := s.leader(ctx)
		if err != nil {
			return nil, err
		}
		if li.ID == s.cfg.NodeID {
			// Raft names us leader but we are not (yet, or any more).
			if attempt > 100 {
				return nil, redirectError("", "")
			}
			if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
				return nil, toStatus(err)
			}
			continue
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedByKey)) > 0 {
			return nil, redirectError(li.ID, li.GRPCAddr)
		}
		msgType, err := responseType(info.FullMethod)
		if err != nil {
			return nil, toStatus(err)
		}
		conn, err := s.peers.get(li.GRPCAddr)
		if err != nil {
			return nil, redirectError(li.ID, li.GRPCAddr)
		}
		out := msgType.New().Interface()
		fctx := metadata.NewOutgoingContext(ctx, metadata.Pairs(forwardedByKey, s.cfg.NodeID))
		if err := conn.Invoke(fctx, info.FullMethod, req.(proto.Message), out); err != nil {
			return nil, err
		}
		return out, nil
	}
}

// waitEstablished holds a call on a brand-new leader until its Barrier has
// applied everything committed before its term, so it never answers from a
// state that lacks acknowledged writes.
func (s *Server) waitEstablished(ctx context.Context) error {
	if s.node.LeaderReady() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !s.node.LeaderReady() {
		if !s.node.IsLeader() {
			return nil // the caller's loop forwards instead
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return toStatus(ctx.Err())
			}
			return redirectError("", "")
		case <-t.C:
		}
	}
	return nil
}

// leader returns the current leader, waiting up to LeaderWait (and the
// caller's deadline) for one; NO_LEADER if none appears.
func (s *Server) leader(ctx context.Context) (cluster.LeaderInfo, error) {
	li := s.node.Leader()
	if li.ID != "" && (li.GRPCAddr != "" || li.ID == s.cfg.NodeID) {
		return li, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderWait)
	defer cancel()
	li, err := s.node.WaitLeader(wctx)
	if err != nil || li.ID == "" || (li.GRPCAddr == "" && li.ID != s.cfg.NodeID) {
		if ctx.Err() != nil {
			return cluster.LeaderInfo{}, toStatus(ctx.Err())
		}
		return cluster.LeaderInfo{}, redirectError("", "")
	}
	return li, nil
}

func isNotLeader(err error) bool {
	return errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, scheduler.ErrNotLeader)
}

// peerPool keeps one client connection per peer address.
type peerPool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeerPool() *peerPool { return &peerPool{conns: map[string]*grpc.ClientConn{}} }

func (p *peerPool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
