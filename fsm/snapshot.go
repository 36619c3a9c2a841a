package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// Snapshot format versions. Version 1 is the format before versioning; a
// state whose cluster version is 1 is still written as version 1, byte for
// byte, so its digest matches older builds'. Version 2 adds the header's
// cluster_version, written only when it is not 1 (an older build refuses
// such a snapshot instead of dropping the field).
const (
	snapshotV1         = 1
	snapshotV2         = 2
	maxSnapshotVersion = snapshotV2
)

// maxRecordBytes bounds one snapshot record on restore: the largest message
// plus headers and metadata, with room to spare.
const maxRecordBytes = MaxMessageBytesCap + 4*MaxHeaderBytes + 1<<20

// frozen is a point-in-time copy of the state made in O(queues): the
// message and dedup trees are cloned copy-on-write and messages are
// immutable, so nothing large is copied while Apply waits.
type frozen struct {
	index          uint64
	lastNow        int64
	clusterVersion uint32
	queues         []frozenQueue
}

type frozenQueue struct {
	rec   *fsmv1.QueueRecord
	msgs  *btree.BTreeG[msgItem]
	dedup *btree.BTreeG[dedupEntry]
}

// freeze must be called with the write lock held (Clone marks the trees).
func (f *FSM) freeze() *frozen {
	fr := &frozen{index: f.appliedIndex, lastNow: f.lastNow, clusterVersion: f.clusterVersion}
	for _, name := range f.sortedQueueNames() {
		q := f.queues[name]
		fr.queues = append(fr.queues, frozenQueue{
			rec: &fsmv1.QueueRecord{
				Name:          q.name,
				Config:        proto.Clone(q.raw).(*fsmv1.QueueConfig),
				AutoDlq:       q.autoDLQ,
				IsDlq:         q.isDLQ,
				EnqueuedTotal: q.enqueuedTotal,
				AckedTotal:    q.ackedTotal,
				NackedTotal:   q.nackedTotal,
				ExpiredTotal:  q.expiredTotal,
				MessageCount:  uint64(q.msgs.Len()),
				DedupCount:    uint64(q.dedup.Len()),
			},
			msgs:  q.msgs.Clone(),
			dedup: q.dedup.Clone(),
		})
	}
	return fr
}

// write streams the frozen state as length-delimited records. It reuses
// one record and one buffer for the messages: a snapshot of a million
// messages otherwise allocates millions of short-lived objects, and the
// garbage collector's assists then stall Apply on the same cores.
func (fr *frozen) write(w io.Writer) error {
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	put := func(m proto.Message) error {
		var err error
		buf, err = opts.MarshalAppend(buf[:0], m)
		if err != nil {
			return err
		}
		var lenBuf [10]byte
		n := putUvarint(lenBuf[:], uint64(len(buf)))
		if _, err := w.Write(lenBuf[:n]); err != nil {
			return err
		}
		_, err = w.Write(buf)
		return err
	}
	hdr := &fsmv1.SnapshotHeader{Version: snapshotV1, LastNowMs: fr.lastNow, AppliedIndex: fr.index, QueueCount: uint64(len(fr.queues))}
	if fr.clusterVersion != 1 {
		hdr.Version, hdr.ClusterVersion = snapshotV2, fr.clusterVersion
	}
	if err := put(hdr); err != nil {
		return err
	}
	rec := &fsmv1.MessageRecord{}
	dedup := &fsmv1.DedupEntry{}
	for _, fq := range fr.queues {
		if err := put(fq.rec); err != nil {
			return err
		}
		var err error
		fq.msgs.Ascend(func(it msgItem) bool {
			fillMessageRecord(rec, it.m)
			err = put(rec)
			return err == nil
		})
		if err != nil {
			return err
		}
		fq.dedup.Ascend(func(e dedupEntry) bool {
			dedup.DedupId, dedup.MessageId, dedup.ExpiresMs = e.dedupID, e.messageID, e.expiresMs
			err = put(dedup)
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func putUvarint(buf []byte, x uint64) int {
	i := 0
	for x >= 0x80 {
		buf[i] = byte(x) | 0x80
		x >>= 7
		i++
	}
	buf[i] = byte(x)
	return i + 1
}

// fillMessageRecord overwrites every field of r with m's.
func fillMessageRecord(r *fsmv1.MessageRecord, m *message) {
	*r = fsmv1.MessageRecord{
		Id: m.id, Payload: m.payload, Headers: m.headers, Priority: m.priority,
		FairnessKey: m.fairnessKey, Weight: m.weight, ThrottleKeys: m.throttleKeys,
		EnqueuedMs: m.enqueuedMs, VisibleMs: m.visibleMs, ExpiresMs: m.expiresMs,
		Attempts: m.attempts, LeaseToken: m.leaseToken, ConsumerId: m.consumerID,
		DeadlineMs: m.deadlineMs, OriginQueue: m.origin, DeadLetterReason: m.dlReason,
		DedupId: m.dedupID, State: fsmv1.MessageState(m.state),
	}
}

// digest hashes the canonical serialisation of the frozen state.
func (fr *frozen) digest() (string, error) {
	h := sha256.New()
	bw := bufio.NewWriterSize(h, 64<<10)
	if err := fr.write(bw); err != nil {
		return "", err
	}
	if err := bw.Flush(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

type fsmSnapshot struct{ fr *frozen }

// Snapshot implements raft.FSM. It only freezes; the writing happens in
// Persist, concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{fr: f.freeze()}, nil
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	bw := bufio.NewWriterSize(sink, 1<<20)
	if err := s.fr.write(bw); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// Restore implements raft.FSM: it replaces the whole state with the
// snapshot's and rebuilds every index. A malformed snapshot leaves the
// previous state in place.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	nf := New(Options{Logger: f.log})
	if err := nf.load(bufio.NewReaderSize(rc, 1<<20)); err != nil {
		err = fmt.Errorf("restore snapshot: %w", err)
		if errors.Is(err, ErrNewerVersion) {
			// Never guess at a newer state: stop, as for a newer entry.
			f.mu.Lock()
			f.halted = fmt.Errorf("%w: %w", err, ErrHalted)
			fatal := f.fatal
			f.mu.Unlock()
			fatal(err)
		}
		return err
	}
	if err := nf.Verify(); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.mu.Lock()
	f.queues, f.delayed, f.ttl, f.leases = nf.queues, nf.delayed, nf.ttl, nf.leases
	f.dedupExp, f.consumers = nf.dedupExp, nf.consumers
	f.lastNow, f.appliedIndex, f.keySeq, f.totalBytes = nf.lastNow, nf.appliedIndex, nf.keySeq, nf.totalBytes
	f.clusterVersion = nf.clusterVersion
	f.checkpoints = nil
	names := f.sortedQueueNames()
	n := f.notifier
	f.mu.Unlock()
	if n != nil {
		n.QueuesChanged(names)
	}
	return nil
}

func (f *FSM) load(r *bufio.Reader) error {
	opts := protodelim.UnmarshalOptions{MaxSize: maxRecordBytes}
	hdr := &fsmv1.SnapshotHeader{}
	if err := opts.UnmarshalFrom(r, hdr); err != nil {
		return fmt.Errorf("%w: header: %v", ErrInvalid, err)
	}
	switch {
	case hdr.Version > maxSnapshotVersion:
		return fmt.Errorf("%w: snapshot format version %d, this build reads versions up to %d; upgrade this node's raftq binary",
			ErrNewerVersion, hdr.Version, maxSnapshotVersion)
	case hdr.Version == snapshotV1 && hdr.ClusterVersion == 0:
		f.clusterVersion = 1
	case hdr.Version == snapshotV2 && hdr.ClusterVersion > MaxLogVersion:
		return fmt.Errorf("%w: snapshot of a cluster at log version %d, this build applies versions up to %d; upgrade this node's raftq binary",
			ErrNewerVersion, hdr.ClusterVersion, MaxLogVersion)
	case hdr.Version == snapshotV2 && hdr.ClusterVersion >= 2:
		f.clusterVersion = hdr.ClusterVersion
	default:
		return fmt.Errorf("%w: snapshot version %d with cluster version %d", ErrInvalid, hdr.Version, hdr.ClusterVersion)
	}
	f.lastNow, f.appliedIndex = hdr.LastNowMs, hdr.AppliedIndex
	type pendingDLQ struct {
		q *queue
		m *message
	}
	var dlqMsgs []pendingDLQ // indexed after every queue exists, so origin counters land
	for i := uint64(0); i < hdr.QueueCount; i++ {
		rec := &fsmv1.QueueRecord{}
		if err := opts.UnmarshalFrom(r, rec); err != nil {
			return fmt.Errorf("%w: queue record: %v", ErrInvalid, err)
		}
		if err := ValidateQueueName(rec.Name); err != nil {
			return err
		}
		if _, dup := f.queues[rec.Name]; dup {
			return fmt.Errorf("%w: queue %s twice", ErrInvalid, rec.Name)
		}
		if err := validateConfig(rec.Config); err != nil {
			return err
		}
		q := newQueue(rec.Name)
		q.raw = rec.Config
		if q.raw == nil {
			q.raw = &fsmv1.QueueConfig{}
		}
		q.autoDLQ, q.isDLQ = rec.AutoDlq, rec.IsDlq
		q.cfg = effectiveConfig(q.raw, q.raw.DeadLetterQueue)
		q.enqueuedTotal, q.ackedTotal, q.nackedTotal, q.expiredTotal = rec.EnqueuedTotal, rec.AckedTotal, rec.NackedTotal, rec.ExpiredTotal
		f.queues[q.name] = q
		var last uint64
		for j := uint64(0); j < rec.MessageCount; j++ {
			mr := &fsmv1.MessageRecord{}
			if err := opts.UnmarshalFrom(r, mr); err != nil {
				return fmt.Errorf("%w: message record: %v", ErrInvalid, err)
			}
			if mr.Id <= last {
				return fmt.Errorf("%w: message ids out of order in %s", ErrInvalid, q.name)
			}
			last = mr.Id
			m := &message{
				id: mr.Id, payload: mr.Payload, headers: mr.Headers, priority: mr.Priority,
				fairnessKey: mr.FairnessKey, weight: max(mr.Weight, 1), throttleKeys: mr.ThrottleKeys,
				dedupID: mr.DedupId, enqueuedMs: mr.EnqueuedMs, visibleMs: mr.VisibleMs,
				expiresMs: mr.ExpiresMs, attempts: mr.Attempts, leaseToken: mr.LeaseToken,
				consumerID: mr.ConsumerId, deadlineMs: mr.DeadlineMs, origin: mr.OriginQueue,
				dlReason: mr.DeadLetterReason,
			}
			switch mr.State {
			case fsmv1.MessageState_MESSAGE_STATE_READY, fsmv1.MessageState_MESSAGE_STATE_DELAYED, fsmv1.MessageState_MESSAGE_STATE_LEASED:
				m.state = msgState(mr.State)
			default:
				return fmt.Errorf("%w: message %d has unknown state %d", ErrInvalid, mr.Id, mr.State)
			}
			if m.state == stateLeased && m.leaseToken == 0 {
				return fmt.Errorf("%w: leased message %d has no lease token", ErrInvalid, mr.Id)
			}
			if m.origin != "" {
				dlqMsgs = append(dlqMsgs, pendingDLQ{q, m})
				continue
			}
			f.put(q, nil, m)
		}
		for j := uint64(0); j < rec.DedupCount; j++ {
			de := &fsmv1.DedupEntry{}
			if err := opts.UnmarshalFrom(r, de); err != nil {
				return fmt.Errorf("%w: dedup record: %v", ErrInvalid, err)
			}
			key := dedupKey(de.DedupId)
			entry := key
			entry.messageID, entry.expiresMs = de.MessageId, de.ExpiresMs
			q.dedup.ReplaceOrInsert(entry)
			f.dedupExp.ReplaceOrInsert(dedupRef{at: de.ExpiresMs, messageID: de.MessageId, queue: q.name, key: key})
		}
	}
	for _, p := range dlqMsgs {
		f.put(p.q, nil, p.m)
	}
	for _, q := range f.queues {
		if d := q.cfg.DeadLetterQueue; d != "" {
			if dq := f.queues[d]; dq == nil || !dq.isDLQ {
				return fmt.Errorf("%w: %s names dead-letter queue %s which is missing or not a DLQ", ErrInvalid, q.name, d)
			}
		}
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing data after snapshot", ErrInvalid)
	}
	return nil
}

// Digest returns the applied index and a hash of the whole state at it.
func (f *FSM) Digest() (uint64, string, error) {
	f.mu.Lock()
	fr := f.freeze()
	f.mu.Unlock()
	d, err := fr.digest()
	return fr.index, d, err
}

// Checkpoints pin the state they froze (copy-on-write keeps replaced
// messages and their payloads alive), so few are kept, each is dropped once
// the log has moved well past it, and its frozen state is let go as soon as
// its digest has been computed.
const (
	keepCheckpoints  = 2
	checkpointMaxAge = 50_000 // log entries
)

// checkpoint freezes the state at a Checkpoint command so every replica can
// report its digest at exactly this index.
func (f *FSM) checkpoint(index uint64) {
	fr := f.freeze()
	fr.index = index
	f.checkpoints = append(f.checkpoints, &checkpointState{index: index, fr: fr})
	if len(f.checkpoints) > keepCheckpoints {
		f.checkpoints = f.checkpoints[1:]
	}
}

// checkpointState is a frozen state until its digest is known, then just
// the digest.
type checkpointState struct {
	index  uint64
	fr     *frozen
	digest string
}

// dropOldCheckpoints lets go of checkpoints far behind the applied index.
func (f *FSM) dropOldCheckpoints() {
	for len(f.checkpoints) > 0 && f.checkpoints[0].index+checkpointMaxAge < f.appliedIndex {
		f.checkpoints = f.checkpoints[1:]
	}
}

// ErrNoCheckpoint: no checkpoint at that index (not applied yet, or aged out).
var ErrNoCheckpoint = errors.New("no checkpoint at that index")

// DigestAt returns the digest of the state frozen by the Checkpoint
// command at index.
func (f *FSM) DigestAt(index uint64) (string, error) {
	f.mu.RLock()
	var cp *checkpointState
	for _, c := range f.checkpoints {
		if c.index == index {
			cp = c
		}
	}
	var (
		fr     *frozen
		digest string
	)
	if cp != nil {
		fr, digest = cp.fr, cp.digest
	}
	f.mu.RUnlock()
	if cp == nil {
		return "", fmt.Errorf("%w: %d", ErrNoCheckpoint, index)
	}
	if digest != "" {
		return digest, nil
	}
	d, err := fr.digest()
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	cp.digest, cp.fr = d, nil
	f.mu.Unlock()
	return d, nil
}
