package main

import (
	"bufio"
	"bytes"
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
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/metagroup"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/transport"
)

// A backup file is Cluster.Backup streams as they arrived: a magic line,
// then each BackupChunk length-delimited (protodelim): a section's info,
// its data chunks, and the SHA-256 and size of its data (docs/api.md).
// backupMagic's file is one section, the data group's (every release
// before meta backups wrote it; --data-only still does); backupMagic2's
// is the data group's section, then the meta group's, both required
// (broker/DESIGN.md, "A backup file holds both groups").
const (
	backupMagic  = "RAFTQ-BACKUP 1\n"
	backupMagic2 = "RAFTQ-BACKUP 2\n"
)

// maxBackupRecord bounds one record read back: a data chunk is at most
// transport.BackupChunkBytes, plus framing.
const maxBackupRecord = transport.BackupChunkBytes + 4096

// errBadBackup marks a file that is not a whole, intact backup.
var errBadBackup = errors.New("not an intact raftq backup")

func newBackupCmd(a *app) *cobra.Command {
	cmd := group("backup", "Save the cluster's state to a file, or make a data dir from one")
	var dataOnly bool
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent copy of the whole cluster state to FILE (admin)",
		Long: `Save a consistent copy of the whole cluster state to FILE, while the cluster
runs. The leader freezes its state at a checkpoint entry of the log, so the
copy holds every write acknowledged before the command started, and streams
it; FILE is written with mode 0600 and appears only when the copy is whole
and its SHA-256 matches the leader's. It holds every message payload and,
with auth on, the token hashes: keep it as secret as the data dir.

From log version 21 the identities, tokens, grants and settings live in the
meta group: FILE then holds the meta group's state too, taken by meta's
leader right after the data group's, and 'backup restore' restores both.
--data-only writes the data group alone, in the format of releases before
meta backups (a token, grant or setting written since the handover is then
not in it).

The SHA-256 printed is the state digest 'raftq cluster verify' reports for
every replica at the backup's index (the meta group's, that of every meta
replica at its index). --rpc-timeout does not apply: a large state takes
as long as it takes (Ctrl-C stops it, leaving no file). --json prints the
data group's summary.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			saved, err := saveBackup(cmd.Context(), c, args[0], dataOnly)
			if err != nil {
				return err
			}
			sum := saved.data
			if a.json {
				return printJSON(a.out, &raftqv1.BackupChunk{Info: sum.Info, Sha256: sum.SHA256, Size: sum.Size})
			}
			_, err = fmt.Fprintf(a.out, "saved %s: index %d, cluster version %d, %s, sha256 %s (from %s)\n",
				args[0], sum.Info.Index, sum.Info.ClusterVersion, fsm.HumanBytes(sum.Size), sum.SHA256, sum.Info.NodeId)
			if m := saved.meta; err == nil && m != nil {
				_, err = fmt.Fprintf(a.out, "  with the meta group: index %d, %s, sha256 %s (from %s)\n",
					m.Info.Index, fsm.HumanBytes(m.Size), m.SHA256, m.Info.NodeId)
			}
			return err
		},
	}
	save.Flags().BoolVar(&dataOnly, "data-only", false, "save the data group alone, in the previous releases' format (without the meta group's tokens, grants and settings)")
	var ro restoreOptions
	host, _ := os.Hostname()
	restore := &cobra.Command{
		Use:   "restore FILE --data-dir DIR",
		Short: "Make DIR a data dir from which a node starts a new cluster holding FILE's state (offline)",
		Long: `Make DIR the data dir of a node that starts, alone, a NEW cluster holding the
state saved in FILE: every queue, message (ready, delayed, leased and
dead-lettered, with its lease and attempt count) and setting, and, in a
backup taken from log version 21 on, the meta group's identities, tokens,
grants and settings (the node serves them at once). DIR must be
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
				return printJSON(a.out, info.BackupInfo)
			}
			withMeta := ""
			if m := info.meta; m != nil {
				withMeta = fmt.Sprintf(" with the meta group (index %d)", m.Index)
			}
			_, err = fmt.Fprintf(a.out, "restored %s (index %d, cluster version %d, taken %s by %s)%s into %s for node %s\n"+
				"start it with: raftq serve --data-dir %s --node-id %s --raft-addr %s ...\n",
				args[0], info.Index, info.ClusterVersion, time.UnixMilli(info.CreatedMs).UTC().Format(time.RFC3339), info.NodeId,
				withMeta, ro.dataDir, ro.nodeID, ro.dataDir, ro.nodeID, ro.raftAddr)
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

// savedBackup is what saveBackup wrote: the data group's section and,
// unless the file is data only, the meta group's.
type savedBackup struct {
	data, meta *client.BackupSummary
}

// saveBackup streams a backup into a temporary file beside path and
// renames it into place once it is whole and verified: the data group's
// state, then, from the handover on (unless dataOnly), the meta group's,
// taken after it (both hold every write acknowledged before the call).
func saveBackup(ctx context.Context, c *client.Client, path string, dataOnly bool) (_ *savedBackup, err error) {
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
	// The magic says how many sections follow, so it is known only once
	// the data group's info says whether meta holds anything: written
	// with the info, before any data.
	section := func(info *raftqv1.BackupInfo) (io.Writer, error) {
		if _, err := protodelim.MarshalTo(bw, &raftqv1.BackupChunk{Info: info}); err != nil {
			return nil, err
		}
		return chunkWriter{bw}, nil
	}
	end := func(sum *client.BackupSummary) error {
		_, err := protodelim.MarshalTo(bw, &raftqv1.BackupChunk{Sha256: sum.SHA256, Size: sum.Size})
		return err
	}
	withMeta := false
	data, err := c.Backup(ctx, func(info *raftqv1.BackupInfo) (io.Writer, error) {
		magic := backupMagic
		if withMeta = !dataOnly && info.GetClusterVersion() >= fsm.HandoverVersion; withMeta {
			magic = backupMagic2
		}
		if _, err := bw.WriteString(magic); err != nil {
			return nil, err
		}
		return section(info)
	})
	if err != nil {
		return nil, err
	}
	if err := end(data); err != nil {
		return nil, fmt.Errorf("backup file: %w", err)
	}
	saved := &savedBackup{data: data}
	if withMeta {
		var state bytes.Buffer // small; kept to check the file restores
		m, err := c.BackupGroup(ctx, meta.MetaGroupID, func(info *raftqv1.BackupInfo) (io.Writer, error) {
			w, err := section(info)
			return io.MultiWriter(w, &state), err
		})
		if err != nil {
			return nil, fmt.Errorf("the meta group's backup (identities, tokens, grants and settings; --data-only saves without them): %w", err)
		}
		// A file that restore would refuse is no backup: refused now,
		// while the cluster is there (queues on data groups other than
		// the legacy one are not in it yet).
		if _, err := meta.Refound(state.Bytes(), m.Info.GetIndex(), m.Info.GetNodeId()); err != nil {
			return nil, fmt.Errorf("the backup could not be restored, so none is saved: %w", err)
		}
		if err := end(m); err != nil {
			return nil, fmt.Errorf("backup file: %w", err)
		}
		saved.meta = m
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
	return saved, nil
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

// restoredBackup is what restoreBackup restored: the data group's info,
// and the meta group's when the file holds it.
type restoredBackup struct {
	*raftqv1.BackupInfo
	meta *raftqv1.BackupInfo
}

// restoreBackup checks the whole file, then restores it into the data dir.
func restoreBackup(ctx context.Context, path string, o restoreOptions) (*restoredBackup, error) {
	if o.nodeID == "" {
		return nil, errors.New("--node-id is empty")
	}
	raftAdv, err := advertise(o.raftAddr, o.advertiseHost, net.InterfaceAddrs)
	if err != nil {
		return nil, fmt.Errorf("--raft-addr: %w", err)
	}
	// First pass: every checksum, and the meta group's state checked and
	// re-founded, before anything is written.
	file, err := readBackupFile(path, o.nodeID)
	if err != nil {
		return nil, err
	}
	info := file.data
	var groups []cluster.GroupState
	if file.meta != nil {
		groups = append(groups, cluster.GroupState{Dir: file.meta.Dir, Index: file.meta.Index, Term: file.metaInfo.Term,
			WALSegmentSize: file.meta.WALSegmentSize, State: file.meta.State})
	}
	br, err := openBackup(path)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	err = broker.Restore(ctx, broker.RestoreConfig{
		DataDir: o.dataDir, NodeID: o.nodeID, RaftAdvertise: raftAdv,
		Index: info.Index, Term: info.Term, ClusterVersion: info.ClusterVersion,
		Groups: groups,
		Logger: slog.New(slog.DiscardHandler),
	}, br)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", path, err)
	}
	return &restoredBackup{BackupInfo: info, meta: file.metaInfo}, nil
}

// checkedBackup is a backup file read whole: its sections' infos and the
// meta group's state, checked and re-founded (nil in a data-only file).
type checkedBackup struct {
	data, metaInfo *raftqv1.BackupInfo
	meta           *metagroup.Restored
}

// readBackupFile reads the file through, checking its framing and every
// section's checksum, and the meta group's state as a restore for nodeID
// would write it (metagroup.PrepareRestore). The data group's state is
// checked by loading it as it is restored (broker.Restore).
func readBackupFile(path, nodeID string) (*checkedBackup, error) {
	br, err := openBackup(path)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	return checkBackup(br, nodeID)
}

// checkBackup is readBackupFile of an opened file.
func checkBackup(br *backupReader, nodeID string) (*checkedBackup, error) {
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, err
	}
	out := &checkedBackup{data: br.info}
	if br.sections == 1 {
		return out, nil
	}
	mi, err := br.nextSection()
	if err != nil {
		return nil, err
	}
	state, err := io.ReadAll(io.LimitReader(br, meta.MaxBackupBytes+1))
	if err != nil {
		return nil, err
	}
	if len(state) > meta.MaxBackupBytes {
		return nil, br.bad("its meta section is larger than %d bytes", meta.MaxBackupBytes)
	}
	if _, err := io.Copy(io.Discard, br); err != nil { // the checksum, should the limit have cut the copy short
		return nil, err
	}
	if out.data.GetClusterVersion() < fsm.HandoverVersion {
		return nil, br.bad("it holds a meta group's state, but its data group is at log version %d, before the handover (%d)",
			out.data.GetClusterVersion(), fsm.HandoverVersion)
	}
	r, err := metagroup.PrepareRestore(state, mi.GetIndex(), nodeID)
	if err != nil {
		if errors.Is(err, meta.ErrNewerVersion) {
			return nil, fmt.Errorf("%s: the meta group's state: %w; restore it with a newer raftq", br.path, err)
		}
		return nil, br.bad("its meta group's state does not load: %v", err)
	}
	out.metaInfo, out.meta = mi, &r
	return out, nil
}

// backupReader reads the data of a backup file, section by section,
// checking its framing as it goes and each section's size and SHA-256 at
// its end: Read returns io.EOF only after the section proved intact
// (and, for the last, that nothing follows it).
type backupReader struct {
	path     string
	f        *os.File
	r        *bufio.Reader
	sections int // 1 (backupMagic) or 2 (backupMagic2: data, then meta)
	section  int // the current one, from 0
	info     *raftqv1.BackupInfo
	sum      hash.Hash
	size     int64
	buf      []byte // the rest of the current data record
	done     bool   // the current section's checksum was read
}

func openBackup(path string) (*backupReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br, err := newBackupReader(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	br.f = f
	return br, nil
}

// newBackupReader reads a backup file's magic and first info from r.
func newBackupReader(path string, r io.Reader) (*backupReader, error) {
	br := &backupReader{path: path, r: bufio.NewReaderSize(r, 1<<20), sum: sha256.New()}
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(br.r, magic); err != nil {
		return nil, br.bad("it does not start as one")
	}
	switch string(magic) {
	case backupMagic:
		br.sections = 1
	case backupMagic2:
		br.sections = 2
	default:
		return nil, br.bad("it does not start as one")
	}
	first, err := br.record()
	if err != nil {
		return nil, err
	}
	if first.Info == nil || first.Info.Index == 0 {
		return nil, br.bad("its first record is not the backup's info")
	}
	// A backup names the group its state is of; before groups were named
	// it named none, which is the same (the only) data group.
	if g := first.Info.GetGroup(); g != "" && g != broker.GroupID {
		return nil, br.bad("it holds group %q, and this build restores only group %q", g, broker.GroupID)
	}
	br.info = first.Info
	return br, nil
}

// nextSection moves to the meta group's section once the data group's
// was read to its end, and returns its info.
func (br *backupReader) nextSection() (*raftqv1.BackupInfo, error) {
	if !br.done || br.section+1 >= br.sections {
		return nil, errors.New("backup file: no next section here")
	}
	m, err := br.record()
	if err != nil {
		return nil, err
	}
	if m.Info == nil || m.Info.Index == 0 || len(m.Data) > 0 || m.Sha256 != "" {
		return nil, br.bad("its second section does not start with its info")
	}
	if g := m.Info.GetGroup(); g != meta.MetaGroupID {
		return nil, br.bad("its second section holds group %q, not %q", g, meta.MetaGroupID)
	}
	br.section++
	br.info, br.sum, br.size, br.done = m.Info, sha256.New(), 0, false
	return m.Info, nil
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
			return 0, br.bad("it holds a second info record in a section")
		case m.Sha256 != "":
			got := hex.EncodeToString(br.sum.Sum(nil))
			if got != m.Sha256 || br.size != m.Size {
				return 0, br.bad("its data (%d bytes, SHA-256 %s) does not match its checksum (%d bytes, %s): the file is damaged",
					br.size, got, m.Size, m.Sha256)
			}
			// After the last section nothing follows; before it,
			// nextSection reads on.
			if last := br.section+1 == br.sections; last {
				if _, err := br.r.ReadByte(); !errors.Is(err, io.EOF) {
					return 0, br.bad("it goes on after its checksum")
				}
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

func (br *backupReader) Close() error {
	if br.f == nil {
		return nil
	}
	return br.f.Close()
}
