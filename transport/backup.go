package transport

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"

	"github.com/raftq/raftq/broker"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
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
