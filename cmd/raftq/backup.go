package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
)

// A backup file is the Cluster.Backup stream as it arrived: this magic
// line, then each BackupChunk length-delimited (protodelim): the info,
// the data chunks, and the SHA-256 and size of the data (docs/api.md).
const backupMagic = "RAFTQ-BACKUP 1\n"

// maxBackupRecord bounds one record read back: a data chunk is at most
// transport.BackupChunkBytes, plus framing.
const maxBackupRecord = transport.BackupChunkBytes + 4096

// errBadBackup marks a file that is not a whole, intact backup.
var errBadBackup = errors.New("not an intact raftq backup")

func newBackupCmd(a *app) *cobra.Command {
	cmd := group("backup", "Save the cluster's state to a file, or make a data dir from one")
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent copy of the whole cluster state to FILE (admin)",
		Long: `Save a consistent copy of the whole cluster state to FILE, while the cluster
runs. The leader freezes its state at a checkpoint entry of the log, so the
copy holds every write acknowledged before the command started, and streams
it; FILE is written with mode 0600 and appears only when the copy is whole
and its SHA-256 matches the leader's. It holds every message payload and,
with auth on, the token hashes: keep it as secret as the data dir.

The SHA-256 printed is the state digest 'raftq cluster verify' reports for
every replica at the backup's index. --rpc-timeout does not apply: a large
state takes as long as it takes (Ctrl-C stops it, leaving no file).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			sum, err := saveBackup(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, &raftqv1.BackupChunk{Info: sum.Info, Sha256: sum.SHA256, Size: sum.Size})
			}
			_, err = fmt.Fprintf(a.out, "saved %s: index %d, cluster version %d, %s, sha256 %s (from %s)\n",
				args[0], sum.Info.Index, sum.Info.ClusterVersion, fsm.HumanBytes(sum.Size), sum.SHA256, sum.Info.NodeId)
			return err
		},
	}
	var ro restoreOptions
	host, _ := os.Hostname()
	restore := &cobra.Command{
		Use:   "restore FILE --data-dir DIR",
		Short: "Make DIR a data dir from which a node starts a new cluster holding FILE's state (offline)",
		Long: `Make DIR the data dir of a node that starts, alone, a NEW cluster holding the
state saved in FILE: every queue, message (ready, delayed, leased and
dead-lettered, with its lease and attempt count) and setting. DIR must be
empty or absent; nothing runs while restoring. FILE's checksum is checked
first, and the state is loaded as it is written, so a damaged file or one
from a newer raftq is refused and DIR is left as it was.

Give the --node-id, --raft-addr and --advertise-host the node will be
started with: it is the only voter of the restored configuration. Start it
with 'raftq serve --data-dir DIR' and those flags; more nodes then join it
with --join like any cluster (leave --bootstrap-expect at 1 on the first).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return err
			}
			if ro.dataDir == "" {
				return errors.New("--data-dir is required: the new node's data dir (empty or absent)")
			}
			info, err := restoreBackup(cmd.Context(), args[0], ro)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.out, info)
			}
			_, err = fmt.Fprintf(a.out, "restored %s (index %d, cluster version %d, taken %s by %s) into %s for node %s\n"+
				"start it with: raftq serve --data-dir %s --node-id %s --raft-addr %s ...\n",
				args[0], info.Index, info.ClusterVersion, time.UnixMilli(info.CreatedMs).UTC().Format(time.RFC3339), info.NodeId,
				ro.dataDir, ro.nodeID, ro.dataDir, ro.nodeID, ro.raftAddr)
			return err
		},
	}
	fl := restore.Flags()
	fl.StringVar(&ro.dataDir, "data-dir", "", "the new node's data dir (empty or absent; required)")
	fl.StringVar(&ro.nodeID, "node-id", host, "the id the node will be started with")
	fl.StringVar(&ro.raftAddr, "raft-addr", "127.0.0.1:7401", "the Raft bind address the node will be started with")
	fl.StringVar(&ro.advertiseHost, "advertise-host", "", "the node's --advertise-host, if it will have one")
	cmd.AddCommand(save, restore)
	return cmd
}

// saveBackup streams a backup into a temporary file beside path and
// renames it into place once it is whole and verified.
func saveBackup(ctx context.Context, c *client.Client, path string) (_ *client.BackupSummary, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if _, err := bw.WriteString(backupMagic); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	sum, err := c.Backup(ctx, func(info *raftqv1.BackupInfo) (io.Writer, error) {
		if _, err := protodelim.MarshalTo(bw, &raftqv1.BackupChunk{Info: info}); err != nil {
			return nil, err
		}
		return chunkWriter{bw}, nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := protodelim.MarshalTo(bw, &raftqv1.BackupChunk{Sha256: sum.SHA256, Size: sum.Size}); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	// The rename is durable only once the directory is.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return sum, nil
}

// chunkWriter writes each Write (one chunk of the stream) as a data record.
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	if _, err := protodelim.MarshalTo(c.w, &raftqv1.BackupChunk{Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

type restoreOptions struct {
	dataDir, nodeID, raftAddr, advertiseHost string
}

// restoreBackup checks the whole file, then restores it into the data dir.
func restoreBackup(ctx context.Context, path string, o restoreOptions) (*raftqv1.BackupInfo, error) {
	if o.nodeID == "" {
		return nil, errors.New("--node-id is empty")
	}
	raftAdv, err := advertise(o.raftAddr, o.advertiseHost, net.InterfaceAddrs)
	if err != nil {
		return nil, fmt.Errorf("--raft-addr: %w", err)
	}
	// First pass: the checksum, before anything is written.
	br, err := openBackup(path)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, br)
	br.Close()
	if err != nil {
		return nil, err
	}
	info := br.info
	br, err = openBackup(path)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	err = broker.Restore(ctx, broker.RestoreConfig{
		DataDir: o.dataDir, NodeID: o.nodeID, RaftAdvertise: raftAdv,
		Index: info.Index, Term: info.Term, ClusterVersion: info.ClusterVersion,
		Logger: slog.New(slog.DiscardHandler),
	}, br)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", path, err)
	}
	return info, nil
}

// backupReader reads the data of a backup file, checking its framing as
// it goes and its size and SHA-256 at the end: Read returns io.EOF only
// after the whole file proved intact.
type backupReader struct {
	path string
	f    *os.File
	r    *bufio.Reader
	info *raftqv1.BackupInfo
	sum  hash.Hash
	size int64
	buf  []byte // the rest of the current data record
	done bool
}

func openBackup(path string) (*backupReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := &backupReader{path: path, f: f, r: bufio.NewReaderSize(f, 1<<20), sum: sha256.New()}
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(br.r, magic); err != nil || string(magic) != backupMagic {
		f.Close()
		return nil, br.bad("it does not start as one")
	}
	first, err := br.record()
	if err != nil {
		f.Close()
		return nil, err
	}
	if first.Info == nil || first.Info.Index == 0 {
		f.Close()
		return nil, br.bad("its first record is not the backup's info")
	}
	// A backup names the group its state is of; before groups were named
	// it named none, which is the same (the only) data group.
	if g := first.Info.GetGroup(); g != "" && g != broker.GroupID {
		f.Close()
		return nil, br.bad("it holds group %q, and this build restores only group %q", g, broker.GroupID)
	}
	br.info = first.Info
	return br, nil
}

func (br *backupReader) bad(why string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", br.path, errBadBackup, fmt.Sprintf(why, args...))
}

func (br *backupReader) record() (*raftqv1.BackupChunk, error) {
	m := &raftqv1.BackupChunk{}
	if err := (protodelim.UnmarshalOptions{MaxSize: maxBackupRecord}).UnmarshalFrom(br.r, m); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, br.bad("it is truncated (no checksum at its end)")
		}
		return nil, br.bad("a record is damaged: %v", err)
	}
	return m, nil
}

func (br *backupReader) Read(p []byte) (int, error) {
	for len(br.buf) == 0 {
		if br.done {
			return 0, io.EOF
		}
		m, err := br.record()
		if err != nil {
			return 0, err
		}
		switch {
		case m.Info != nil:
			return 0, br.bad("it holds a second info record")
		case m.Sha256 != "":
			got := hex.EncodeToString(br.sum.Sum(nil))
			if got != m.Sha256 || br.size != m.Size {
				return 0, br.bad("its data (%d bytes, SHA-256 %s) does not match its checksum (%d bytes, %s): the file is damaged",
					br.size, got, m.Size, m.Sha256)
			}
			if _, err := br.r.ReadByte(); !errors.Is(err, io.EOF) {
				return 0, br.bad("it goes on after its checksum")
			}
			br.done = true
		default:
			br.sum.Write(m.Data)
			br.size += int64(len(m.Data))
			br.buf = m.Data
		}
	}
	n := copy(p, br.buf)
	br.buf = br.buf[n:]
	return n, nil
}

func (br *backupReader) Close() error { return br.f.Close() }
