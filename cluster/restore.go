package cluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/raftq/raftq/internal/hclogslog"
	"github.com/raftq/raftq/internal/hostport"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftlog"
)

// RestoreConfig says which node a restored data dir belongs to. NodeID and
// RaftAdvertise must be what the node will start with (serve's --node-id
// and advertised Raft address): they are the only server of the restored
// configuration, and a node that is not in its own configuration never
// elects itself.
type RestoreConfig struct {
	DataDir       string
	NodeID        string
	RaftAdvertise string
	// Index and Term are the log position the state was taken at. The
	// snapshot is written at Index; Term becomes the node's current term,
	// so the restored cluster's first leader starts a later term than any
	// the state remembers (the state's clock tells leaders apart by term).
	Index, Term uint64
	// raftlog.LogStore is the log store the restored data dir is laid out for
	// ("" = raftlog.DefaultLogStore).
	LogStore raftlog.LogStore
	// Groups are the node's other Raft groups restored beside the data
	// group (the meta group, in DATA/meta), each with this node as its
	// only voter; written after the data group's state and removed with
	// it if anything fails.
	Groups []GroupState
}

// GroupState is one more Raft group's state for a restored data dir.
type GroupState struct {
	// Dir is the group's directory, relative to the data dir.
	Dir string
	// Index and Term are the log position the state was taken at.
	Index, Term uint64
	// WALSegmentSize is the size of the group's wal segments (0 = the
	// default); the group's own log store is the default one.
	WALSegmentSize int
	// State is the group's FSM snapshot, already checked by the caller.
	State []byte
}

// RestoreSnapshot makes cfg.DataDir the data dir of a node that starts as
// the only voter of a new cluster holding the state read from data (an
// FSM snapshot stream): the way hashicorp/raft's RecoverCluster leaves a
// node after recovery, without a log to replay. It writes data into the
// file snapshot store as a snapshot at Index whose configuration is this
// node alone, and Term into the stable store. Started on that dir, the
// node restores the snapshot, sees state (so it never bootstraps) and
// elects itself; other nodes then join it as they join any cluster.
//
// The data dir must be empty or absent: restoring over a node's state
// would mix two histories. On failure nothing is left in it. validate,
// if set, reads the same bytes as they are written (on its own
// goroutine); its error, or a short read of it, fails the restore.
func RestoreSnapshot(ctx context.Context, cfg RestoreConfig, data io.Reader, validate func(io.Reader) error) (err error) {
	if cfg.NodeID == "" || cfg.DataDir == "" || cfg.RaftAdvertise == "" {
		return errors.New("cluster: restore: node id, data dir and Raft address are required")
	}
	if cfg.Index == 0 {
		return errors.New("cluster: restore: the snapshot's log index is 0")
	}
	addr, err := resolveAdvertise(ctx, cfg.RaftAdvertise)
	if err != nil {
		return fmt.Errorf("cluster: restore: Raft address: %w", err)
	}
	created, err := claimEmptyDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cleanDir(cfg.DataDir, created)
		}
	}()

	if err := writeGroupState(ctx, cfg.DataDir, cfg.NodeID, addr, cfg.Index, cfg.Term, cfg.LogStore, 0, data, validate); err != nil {
		return err
	}
	for _, gs := range cfg.Groups {
		if gs.Dir == "" || !filepath.IsLocal(gs.Dir) || gs.Index == 0 {
			return fmt.Errorf("cluster: restore: group state in %q at index %d: a directory inside the data dir and an index are required", gs.Dir, gs.Index)
		}
		if err := writeGroupState(ctx, filepath.Join(cfg.DataDir, gs.Dir), cfg.NodeID, addr, gs.Index, gs.Term, "", gs.WALSegmentSize, bytes.NewReader(gs.State), nil); err != nil {
			return fmt.Errorf("%w (group in %s)", err, gs.Dir)
		}
	}
	// A restored cluster is a new one: its own id, which the nodes that
	// join it take (DESIGN.md, "Cluster identity").
	if err := writeClusterID(cfg.DataDir, newClusterID()); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	// The dir is this node's: serve takes its id from it, and refuses
	// another, which would not be in the restored configuration.
	return claimDataDir(cfg.DataDir, cfg.NodeID)
}

// writeGroupState writes one Raft group's state into dir: data as a
// snapshot at index whose configuration is nodeID (at addr) alone, and
// term as the current term, in the log store logStore ("" = the default)
// with wal segments of segmentSize bytes (0 = the default).
func writeGroupState(ctx context.Context, dir, nodeID, addr string, index, term uint64, logStore raftlog.LogStore, segmentSize int, data io.Reader, validate func(io.Reader) error) (err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, raftlog.RaftDBFile)})
	if err != nil {
		return fmt.Errorf("cluster: restore: raft store: %w", err)
	}
	defer func() {
		if store != nil {
			err = errors.Join(err, store.Close())
		}
	}()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, raftgroup.SnapshotsRetained, hclogslog.New(slog.New(slog.DiscardHandler), "snapshots"))
	if err != nil {
		return fmt.Errorf("cluster: restore: snapshot store: %w", err)
	}
	// The file store encodes the configuration's peers through a
	// transport (for snapshot readers of raft's oldest protocol); an
	// in-memory one encodes an address as itself, as the TCP one does.
	_, trans := raft.NewInmemTransport(raft.ServerAddress(addr))
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(nodeID), Address: raft.ServerAddress(addr)}}}
	term = max(term, 1)
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, term, conf, index, trans)
	if err != nil {
		return fmt.Errorf("cluster: restore: create snapshot: %w", err)
	}
	if err := copyValidated(ctx, sink, data, validate); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: restore: %w", err)
	}
	if err := sink.Close(); err != nil { // fsyncs the state, its meta and the directory
		return fmt.Errorf("cluster: restore: write snapshot: %w", err)
	}
	if err := store.SetUint64([]byte(raftlog.KeyCurrentTerm), term); err != nil {
		return fmt.Errorf("cluster: restore: set term: %w", err)
	}
	if cmp.Or(logStore, raftlog.DefaultLogStore) == raftlog.LogStoreWAL {
		// The term moves into a new wal, and raft.db becomes its marker.
		err := store.Close()
		store = nil
		if err != nil {
			return fmt.Errorf("cluster: restore: raft store: %w", err)
		}
		l, err := raftlog.OpenSized(dir, raftlog.LogStoreWAL, segmentSize, hclog.NewNullLogger())
		if err != nil {
			return fmt.Errorf("cluster: restore: %w", err)
		}
		if err := l.Close(); err != nil {
			return fmt.Errorf("cluster: restore: %w", err)
		}
	}
	return nil
}

// copyValidated copies data to w while validate reads the same bytes.
func copyValidated(ctx context.Context, w io.Writer, data io.Reader, validate func(io.Reader) error) error {
	if validate == nil {
		_, err := io.Copy(w, ctxReader{ctx, data})
		return err
	}
	pr, pw := io.Pipe()
	verr := make(chan error, 1)
	go func() {
		err := validate(pr)
		if err == nil {
			// What validate left unread must still be there to fail on.
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(cmpErr(err, errValidatorStopped)) // unblocks the writer if validate stopped early
		verr <- err
	}()
	_, err := io.Copy(io.MultiWriter(w, pw), ctxReader{ctx, data})
	pw.CloseWithError(err) // nil: validate sees EOF
	vErr := <-verr
	switch {
	case vErr != nil && (err == nil || errors.Is(err, vErr)):
		// validate failed first (the copy failed on its closed pipe).
		return fmt.Errorf("the state does not load: %w", vErr)
	case err != nil:
		return err // reading data failed; validate only saw the end
	}
	return nil
}

var errValidatorStopped = errors.New("validation ended")

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// resolveAdvertise turns host:port into the address the node's Raft port
// reports for itself, by raftmux.Listen's rule: an IP as itself, a host
// name kept as the name (each dial resolves it, so a container that comes
// back with another IP is still found), once it is known to resolve.
func resolveAdvertise(ctx context.Context, addr string) (string, error) {
	host, port, err := hostport.Split(addr)
	if err != nil {
		return "", err
	}
	ip, err := hostport.ResolveIP(ctx, host)
	if err != nil {
		return "", err
	}
	if ip.IsUnspecified() {
		return "", fmt.Errorf("%s is not an address other nodes can reach", addr)
	}
	if net.ParseIP(host) == nil {
		return net.JoinHostPort(host, strconv.Itoa(port)), nil
	}
	return (&net.TCPAddr{IP: ip, Port: port}).String(), nil
}

// claimEmptyDir makes sure dir exists and is empty, reporting whether it
// was created here (so a failed restore removes it rather than leaving an
// empty directory the operator did not make).
func claimEmptyDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return false, fmt.Errorf("cluster: restore: data dir: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("cluster: restore: data dir: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("cluster: restore: data dir %s is not empty (%d entries, e.g. %s): "+
			"a backup is restored only into an empty or new directory, never over a node's state", dir, len(entries), entries[0].Name())
	}
	return false, nil
}

// cleanDir removes what a failed restore wrote.
func cleanDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
