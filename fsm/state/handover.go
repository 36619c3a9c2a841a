package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// HandoverVersion is the log version from which the cluster-wide state
// lives in the meta group (issue 21, meta/DESIGN.md "Upgrade in place").
// The entry raising the cluster to it names the meta group's founding
// voters (SetClusterVersion.meta_founders), which this state keeps (in
// snapshots too) so a founder bootstraps meta whether it applies the
// entry or restores a snapshot holding it. From then on this log's
// identities, tokens, grants and settings are frozen: the edge writes
// them to meta, the auth commands are refused here (ErrMoved) and
// SetClusterSettings is taken only from the data leader following meta
// (from_meta). The freeze reads the state's cluster version, not the
// entry's: an entry proposed under an older version just before the
// raise still commits after it, and must not change what the meta
// group's seed copies. Before the raise nothing changes, so older logs
// replay as they did.
const HandoverVersion uint32 = 21

// MaxMetaFounders bounds the founders an entry may name (meta's
// MaxMetaVoters).
const MaxMetaFounders = 7

// ErrMoved: the cluster-wide state this command changes lives in the
// meta group from the handover version; it is refused in this log.
var ErrMoved = errors.New("moved to the meta group")

// MetaServer is one founding voter of the meta group.
type MetaServer struct{ ID, Address string }

// checkFounders validates the founders a raise to the handover names:
// 1 to MaxMetaFounders servers, ids and addresses present and distinct.
func checkFounders(fs []*fsmv1.MetaServer) ([]MetaServer, error) {
	if len(fs) == 0 || len(fs) > MaxMetaFounders {
		return nil, fmt.Errorf("%w: raising the cluster to log version %d names %d meta founders, want 1 to %d", ErrInvalid, HandoverVersion, len(fs), MaxMetaFounders)
	}
	out := make([]MetaServer, 0, len(fs))
	for _, f := range fs {
		id, addr := f.GetId(), f.GetAddress()
		if id == "" || addr == "" || len(id) > 255 || len(addr) > 255 || strings.ContainsAny(id+addr, "\x00\r\n") {
			return nil, fmt.Errorf("%w: meta founder %q at %q", ErrInvalid, id, addr)
		}
		for _, o := range out {
			if o.ID == id || o.Address == addr {
				return nil, fmt.Errorf("%w: meta founder %q at %q named twice", ErrInvalid, id, addr)
			}
		}
		out = append(out, MetaServer{ID: id, Address: addr})
	}
	return out, nil
}

// moved refuses a write of the cluster-wide state once the cluster has
// reached the handover version.
func (tx *Tx) moved(what string) error {
	if tx.s.clusterVersion >= HandoverVersion {
		return fmt.Errorf("%w: %s: the cluster runs log version %d, where identities, tokens, grants and settings live in the meta group", ErrMoved, what, tx.s.clusterVersion)
	}
	return nil
}

func foundersProto(fs []MetaServer) []*fsmv1.MetaServer {
	out := make([]*fsmv1.MetaServer, len(fs))
	for i, f := range fs {
		out[i] = &fsmv1.MetaServer{Id: f.ID, Address: f.Address}
	}
	return out
}

// MetaFounders are the meta group's founding voters (nil below the
// handover version).
func (v View) MetaFounders() []MetaServer { return slices.Clone(v.s.metaFounders) }

// Handover is what the meta group's seed copies out of this state once
// the cluster has reached HandoverVersion (frozen from then on, but for
// the queue list).
type Handover struct {
	Founders       []MetaServer
	Auth           *fsmv1.AuthRecord
	ClusterVersion uint32
	MaxQueuedBytes int64
	MaxQueues      int64
	Queues         []string // every queue, dead-letter queues included, sorted
	Index          uint64   // the applied index it was read at
}

// Handover reads the seed's copy; ok is false below HandoverVersion.
func (v View) Handover() (h Handover, ok bool) {
	s := v.s
	if s.clusterVersion < HandoverVersion {
		return Handover{}, false
	}
	return Handover{
		Founders: slices.Clone(s.metaFounders), Auth: s.auth.Record(), ClusterVersion: s.clusterVersion,
		MaxQueuedBytes: s.maxQueuedBytes, MaxQueues: s.maxQueues, Queues: s.sortedQueueNames(), Index: s.appliedIndex,
	}, true
}

// RefoundMeta returns the snapshot stream r with its header's meta
// founders replaced by founders, when the state is at HandoverVersion or
// later (else r's bytes unchanged): an offline restore makes a new
// cluster of the restoring node alone, whose meta group must be founded
// by it, not by the servers of the cluster the backup came from (their
// addresses, and maybe their ids, are not this cluster's). The rest of
// the stream is passed through as it is read.
func RefoundMeta(r io.Reader, founders []MetaServer) (io.Reader, error) {
	br := bufio.NewReader(r)
	size, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot header length: %v", ErrInvalid, err)
	}
	if size > 1<<20 {
		return nil, fmt.Errorf("%w: snapshot header of %d bytes", ErrInvalid, size)
	}
	raw := make([]byte, size)
	if _, err := io.ReadFull(br, raw); err != nil {
		return nil, fmt.Errorf("%w: snapshot header: %v", ErrInvalid, err)
	}
	hdr := &fsmv1.SnapshotHeader{}
	if err := proto.Unmarshal(raw, hdr); err != nil {
		return nil, fmt.Errorf("%w: snapshot header: %v", ErrInvalid, err)
	}
	if hdr.GetClusterVersion() >= HandoverVersion {
		if _, err := checkFounders(foundersProto(founders)); err != nil {
			return nil, err
		}
		hdr.MetaFounders = foundersProto(founders)
		if raw, err = (proto.MarshalOptions{Deterministic: true}).Marshal(hdr); err != nil {
			return nil, err
		}
	}
	var lenBuf [10]byte
	n := putUvarint(lenBuf[:], uint64(len(raw)))
	return io.MultiReader(bytes.NewReader(lenBuf[:n]), bytes.NewReader(raw), br), nil
}
