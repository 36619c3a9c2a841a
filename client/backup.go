package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc"
)

// ErrBackupChecksum: the data a backup stream delivered does not hash to
// the checksum the leader sent with it.
var ErrBackupChecksum = errors.New("backup checksum mismatch")

// BackupSummary is what one backup delivered.
type BackupSummary struct {
	Info   *raftqv1.BackupInfo
	SHA256 string // hex, of all data: the state digest at Info.Index
	Size   int64  // bytes of data
}

// Backup streams a consistent backup of the cluster's whole state from the
// leader (Cluster.Backup; the caller needs the admin permission). Once the
// leader has frozen the state, start is called with what the backup is
// and returns where its data goes; the data (the replicated log's
// snapshot format) is written there as it arrives, never held whole. The
// call succeeds only if the data's SHA-256 and size match what the leader
// sent at the end. Redirects and unavailable nodes are retried until the
// leader starts sending; after that a failure is returned as it is (w
// already holds part of a backup, which the caller must discard). A
// RetryPolicy.AttemptTimeout bounds the whole transfer.
func (c *Client) Backup(ctx context.Context, start func(*raftqv1.BackupInfo) (io.Writer, error)) (*BackupSummary, error) {
	return c.BackupGroup(ctx, "", start)
}

// BackupGroup is Backup of one Raft group: "" or "data" (the data group,
// as Backup), or "meta", the meta group's state (identities, tokens,
// grants, settings, placements: from log version 21 they live there, not
// in the data group), served by meta's leader (a node forwards the
// stream there). A whole backup is both (raftq backup save).
func (c *Client) BackupGroup(ctx context.Context, group string, start func(*raftqv1.BackupInfo) (io.Writer, error)) (*BackupSummary, error) {
	var (
		sum   *BackupSummary
		final error
	)
	err := c.retrying(ctx, "backup", c.pool.target, func(ctx context.Context, _ string, cc *grpc.ClientConn) error {
		ctx, cancel := context.WithCancel(ctx) // ends the stream however this attempt ends
		defer cancel()
		stream, err := raftqv1.NewClusterClient(cc).Backup(ctx, &raftqv1.BackupRequest{Group: group})
		if err != nil {
			return err
		}
		first, err := stream.Recv()
		if err != nil {
			return err // nothing written yet: a redirect or outage may be retried
		}
		// From here on nothing is retried: the writer has been handed out.
		sum, final = receiveBackup(stream, first, group, start)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if final != nil {
		return nil, fmt.Errorf("raftq backup: %w", final)
	}
	return sum, nil
}

// receiveBackup takes the rest of a stream whose first message is first.
func receiveBackup(stream grpc.ServerStreamingClient[raftqv1.BackupChunk], first *raftqv1.BackupChunk, group string, start func(*raftqv1.BackupInfo) (io.Writer, error)) (*BackupSummary, error) {
	info := first.GetInfo()
	if info == nil || info.Index == 0 || len(first.Data) > 0 {
		return nil, errors.New("the stream did not start with the backup's info")
	}
	if group != "" && group != "data" && info.GetGroup() != group {
		return nil, fmt.Errorf("asked for group %q, the node sent group %q (a build that does not back it up)", group, info.GetGroup())
	}
	w, err := start(info)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	var size int64
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the stream ended before the checksum: the backup is incomplete")
		}
		if err != nil {
			return nil, err
		}
		if m.Sha256 != "" {
			got := hex.EncodeToString(h.Sum(nil))
			if m.Sha256 != got || m.Size != size {
				return nil, fmt.Errorf("%w: received %d bytes with SHA-256 %s, the leader sent %d bytes with %s",
					ErrBackupChecksum, size, got, m.Size, m.Sha256)
			}
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("the stream went on after its checksum (%v)", err)
			}
			return &BackupSummary{Info: info, SHA256: got, Size: size}, nil
		}
		h.Write(m.Data)
		size += int64(len(m.Data))
		if _, err := w.Write(m.Data); err != nil {
			return nil, err
		}
	}
}
