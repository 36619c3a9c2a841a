package transport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// BackupChunkBytes is the most data one BackupChunk carries: small enough
// for any client's default receive limit, large enough that the per-message
// cost does not matter.
const BackupChunkBytes = 1 << 20

// Backup streams the state frozen at a fresh Checkpoint entry. Only the
// leader proposes that entry, so a follower redirects (NOT_LEADER) as for
// Lease; the client follows. Data goes out as it is serialised, so the
// node holds at most one chunk of it besides the frozen state itself;
// gRPC flow control paces it to the client.
func (c *clusterService) Backup(req *raftqv1.BackupRequest, stream raftqv1.Cluster_BackupServer) error {
	if req.GetGroup() == meta.MetaGroupID {
		return c.backupMeta(req, stream)
	}
	if err := checkGroup(req); err != nil {
		return err
	}
	ctx := stream.Context()
	route, err := c.s.route(ctx)
	if err != nil {
		return err
	}
	if !route.Local {
		return redirectError(route.LeaderID, route.LeaderAddr)
	}
	bk, err := c.s.legacy.ops.Backup(ctx)
	if err != nil {
		if isNotLeader(err) {
			return redirectError(c.s.legacy.b.Leader())
		}
		return toStatus(err)
	}
	info := &raftqv1.BackupInfo{
		Index: bk.Index, Term: bk.Term, ClusterVersion: bk.ClusterVersion,
		NodeId: bk.NodeID, CreatedMs: bk.Created.UnixMilli(), Group: broker.GroupID,
	}
	if err := stream.Send(&raftqv1.BackupChunk{Info: info}); err != nil {
		return err
	}
	cw := &chunkSender{send: stream.Send, stopping: c.s.stopping, sum: sha256.New(), buf: make([]byte, 0, BackupChunkBytes)}
	n, err := bk.WriteTo(cw)
	if err == nil {
		err = cw.flush()
	}
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
			return err
		}
		return toStatus(err)
	}
	c.s.log.Info("backup sent", "index", bk.Index, "bytes", n, "cluster_version", bk.ClusterVersion)
	return stream.Send(&raftqv1.BackupChunk{Sha256: hex.EncodeToString(cw.sum.Sum(nil)), Size: n})
}

// backupMeta streams the meta group's state (group "meta"), which meta's
// leader takes (metagroup.Group.Backup): here when this node leads meta,
// else the stream is relayed from there, one hop, as a meta write is
// forwarded (meta.go), with the caller's credentials. The info's index is
// the meta state's applied index, its cluster_version the data-plane
// version meta records, and the SHA-256 at the end the meta digest every
// replica computes at that index.
func (c *clusterService) backupMeta(req *raftqv1.BackupRequest, stream raftqv1.Cluster_BackupServer) error {
	s := c.s
	if !s.metaActive() {
		return status.Errorf(codes.FailedPrecondition,
			"the meta group holds nothing before the handover (log version %d): the data group's backup holds the whole state", fsm.HandoverVersion)
	}
	ctx := stream.Context()
	route, err := s.cfg.Meta.Route(ctx, s.cfg.LeaderWait)
	if err != nil {
		if ctx.Err() != nil {
			return toStatus(ctx.Err())
		}
		return redirectError("", "")
	}
	if !route.Local {
		return s.relayBackup(ctx, route, req, stream)
	}
	s.awaitSeed(ctx)
	bk, err := s.cfg.Meta.Backup(ctx)
	if err != nil {
		if isNotLeader(err) {
			l := s.cfg.Meta.Raft().Leadership()
			return redirectError(l.LeaderID, l.LeaderClientAddr)
		}
		return toStatus(err)
	}
	info := &raftqv1.BackupInfo{
		Index: bk.Index, Term: bk.Term, ClusterVersion: bk.ClusterVersion,
		NodeId: bk.NodeID, CreatedMs: bk.Created.UnixMilli(), Group: meta.MetaGroupID,
	}
	if err := stream.Send(&raftqv1.BackupChunk{Info: info}); err != nil {
		return err
	}
	cw := &chunkSender{send: stream.Send, stopping: s.stopping, sum: sha256.New(), buf: make([]byte, 0, BackupChunkBytes)}
	_, err = cw.Write(bk.State)
	if err == nil {
		err = cw.flush()
	}
	if err != nil {
		return err
	}
	s.log.Info("meta backup sent", "index", bk.Index, "bytes", len(bk.State))
	return stream.Send(&raftqv1.BackupChunk{Sha256: hex.EncodeToString(bk.SHA256[:]), Size: int64(len(bk.State))})
}

// relayBackup passes meta's leader's Backup stream on to the caller.
func (s *Server) relayBackup(ctx context.Context, route broker.Route, req *raftqv1.BackupRequest, stream raftqv1.Cluster_BackupServer) error {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedByKey)) > 0 {
		// Forwarded to us, but we do not lead meta (any more): one hop only.
		return redirectError(route.LeaderID, route.LeaderClientAddr)
	}
	conn, err := s.peers.Get(route.LeaderID, route.LeaderAddr)
	if err != nil {
		return redirectError(route.LeaderID, route.LeaderClientAddr)
	}
	ctx, cancel := context.WithCancel(ctx) // ends the upstream however this ends
	defer cancel()
	fctx := metadata.AppendToOutgoingContext(s.cfg.Auth.Outgoing(ctx), forwardedByKey, s.legacy.b.ID())
	up, err := raftqv1.NewClusterClient(conn).Backup(fctx, req)
	if err != nil {
		return err
	}
	for {
		m, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}

// chunkSender cuts a byte stream into BackupChunks and hashes it.
type chunkSender struct {
	send     func(*raftqv1.BackupChunk) error
	stopping <-chan struct{}
	sum      hash.Hash
	buf      []byte
}

func (w *chunkSender) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (w *chunkSender) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	select {
	case <-w.stopping:
		// A backup can take long; it must not hold the node's stop.
		return status.Error(codes.Unavailable, "the node is stopping; take the backup again")
	default:
	}
	w.sum.Write(w.buf)
	// gRPC may read a sent message after Send returns (stats handlers):
	// each chunk gets a buffer of its own.
	if err := w.send(&raftqv1.BackupChunk{Data: w.buf}); err != nil {
		return err
	}
	w.buf = make([]byte, 0, cap(w.buf))
	return nil
}
