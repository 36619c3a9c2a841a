package state

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/raftq/raftq/acl"
	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
)

// Snapshot format versions. Version 1 is the format before versioning; a
// state whose cluster version is 1 is still written as version 1, byte for
// byte, so its digest matches older builds'. Version 2 adds the header's
// cluster_version, written only when it is not 1 (an older build refuses
// such a snapshot instead of dropping the field). Version 3, written at
// cluster version 3, adds each queue's key_order; version 4, from cluster
// version 4 on, adds the leader clock (clock.go); version 5, from cluster
// version 5 on, adds one AuthRecord after the last queue; version 6, from
// cluster version 7 on, also follows each queue's dedup entries with its
// recently settled outcomes (recent.go); version 7, from cluster version
// 11 on, also follows the AuthRecord with the keyed deletes
// (deletekeys.go). Each format is
// written only at the cluster versions it belongs to, so replicas of two
// builds at the same cluster version hash the same bytes.
const (
	snapshotV1         = 1
	snapshotV2         = 2
	snapshotV3         = 3
	snapshotV4         = 4
	snapshotV5         = 5
	snapshotV6         = 6
	snapshotV7         = 7
	maxSnapshotVersion = snapshotV7
)

// maxRecordBytes bounds one snapshot record on restore: the largest message
// plus headers and metadata, with room to spare.
const maxRecordBytes = MaxMessageBytesCap + 4*MaxHeaderBytes + 1<<20

// Frozen is a point-in-time copy of the store made in O(queues): the
// message and dedup trees are cloned copy-on-write and messages are
// immutable, so nothing large is copied while Apply waits. It can be
// streamed (a snapshot) or hashed (a digest) later, off the apply path.
type Frozen struct {
	index          uint64
	lastNow        int64
	leader         leaderClock
	clusterVersion uint32
	maxQueuedBytes int64
	maxQueues      int64
	deadTimeFromMs int64
	metaFounders   []MetaServer // immutable: shared
	queues         []frozenQueue
	auth           *Auth                     // immutable: shared, not copied
	deleted        *btree.BTreeG[deletedKey] // nil below cluster version 11
}

type frozenQueue struct {
	rec    *fsmv1.QueueRecord
	msgs   *btree.BTreeG[msgItem]
	dedup  *btree.BTreeG[dedupEntry]
	recent *btree.BTreeG[recentEntry] // nil below cluster version 5
}

// Freeze copies the store as of index (the applied index for a snapshot,
// the Checkpoint entry's own index for a checkpoint). It writes to the
// trees (Clone marks them shared), so it needs the writer's exclusion.
func (s *Store) Freeze(index uint64) *Frozen {
	fr := &Frozen{index: index, lastNow: s.lastNow, leader: s.leader, clusterVersion: s.clusterVersion, maxQueuedBytes: s.maxQueuedBytes, maxQueues: s.maxQueues, deadTimeFromMs: s.deadTimeFromMs, metaFounders: s.metaFounders, auth: s.auth}
	if s.clusterVersion >= DeleteKeyVersion {
		fr.deleted = s.deleted.Clone()
	}
	for _, name := range s.sortedQueueNames() {
		q := s.queues[name]
		var recent *btree.BTreeG[recentEntry]
		var recentCount uint64
		if s.clusterVersion >= recentVersion {
			recent, recentCount = q.recent.Clone(), uint64(q.recent.Len())
		}
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
				KeyOrder:      keyOrderAt(s.clusterVersion, q),
				RecentCount:   recentCount,
				Redrives:      redrivesAt(s.clusterVersion, q),
				Pauses:        q.pauseRecords(),
			},
			msgs:   q.msgs.Clone(),
			dedup:  q.dedup.Clone(),
			recent: recent,
		})
	}
	return fr
}

// redrivesAt is what a snapshot at cluster version cv records of q's
// redrive jobs: copies (a job changes in place as it steps), none before
// RedriveVersion.
func redrivesAt(cv uint32, q *queue) []*fsmv1.RedriveJob {
	if cv < RedriveVersion || len(q.redrives) == 0 {
		return nil
	}
	out := make([]*fsmv1.RedriveJob, len(q.redrives))
	for i, j := range q.redrives {
		out[i] = j.record()
	}
	return out
}

// keyOrderAt is what a snapshot at cluster version cv records of q's key
// order: nothing before keyOrderVersion (the older formats, unchanged).
func keyOrderAt(cv uint32, q *queue) []*fsmv1.KeyOrder {
	if cv < keyOrderVersion {
		return nil
	}
	return q.keyOrder()
}

// Stream writes the frozen state as length-delimited records: the
// snapshot format, and the canonical form the digest hashes. It reuses
// one record and one buffer for the messages: a snapshot of a million
// messages otherwise allocates millions of short-lived objects, and the
// garbage collector's assists then stall Apply on the same cores.
func (fr *Frozen) Stream(w io.Writer) error { return fr.stream(w, true) }

// Canonical writes the frozen state as Stream does but without the meta
// group's founders: the form the digest hashes and a backup carries. The
// founders are where one cluster's meta group began, derived from the
// log by every replica alike; a backup restored elsewhere is founded anew
// (RefoundMeta), and its digest must stay the source's.
func (fr *Frozen) Canonical(w io.Writer) error { return fr.stream(w, false) }

func (fr *Frozen) stream(w io.Writer, founders bool) error {
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
	switch {
	case fr.clusterVersion >= DeleteKeyVersion:
		hdr.Version, hdr.ClusterVersion = snapshotV7, fr.clusterVersion
		hdr.LeaderTerm, hdr.LeaderNowMs = fr.leader.term, fr.leader.nowMs
		hdr.MaxQueuedBytes = fr.maxQueuedBytes
		hdr.DeletedCount = uint64(fr.deleted.Len())
		if fr.clusterVersion >= GuardVersion {
			// An older build refuses the cluster version before it
			// could drop the field.
			hdr.MaxQueues = fr.maxQueues
		}
		if fr.clusterVersion >= RedriveVersion {
			hdr.DeadTimeFromMs = fr.deadTimeFromMs
		}
		if fr.clusterVersion >= HandoverVersion && founders {
			hdr.MetaFounders = foundersProto(fr.metaFounders)
		}
	case fr.clusterVersion >= recentVersion:
		hdr.Version, hdr.ClusterVersion = snapshotV6, fr.clusterVersion
		hdr.LeaderTerm, hdr.LeaderNowMs = fr.leader.term, fr.leader.nowMs
		if fr.clusterVersion >= AdmitVersion {
			// A field an older build would ignore, but it refuses the
			// cluster version first.
			hdr.MaxQueuedBytes = fr.maxQueuedBytes
		}
	case fr.clusterVersion >= AuthVersion:
		hdr.Version, hdr.ClusterVersion = snapshotV5, fr.clusterVersion
		hdr.LeaderTerm, hdr.LeaderNowMs = fr.leader.term, fr.leader.nowMs
	case fr.clusterVersion >= elapsedTimeVersion:
		hdr.Version, hdr.ClusterVersion = snapshotV4, fr.clusterVersion
		hdr.LeaderTerm, hdr.LeaderNowMs = fr.leader.term, fr.leader.nowMs
	case fr.clusterVersion >= keyOrderVersion:
		hdr.Version, hdr.ClusterVersion = snapshotV3, fr.clusterVersion
	case fr.clusterVersion != 1:
		hdr.Version, hdr.ClusterVersion = snapshotV2, fr.clusterVersion
	}
	if err := put(hdr); err != nil {
		return err
	}
	rec := &fsmv1.MessageRecord{}
	headers := map[string]string{}
	dedup := &fsmv1.DedupEntry{}
	recent := &fsmv1.RecentEntry{}
	for _, fq := range fr.queues {
		if err := put(fq.rec); err != nil {
			return err
		}
		var err error
		fq.msgs.Ascend(func(it msgItem) bool {
			fillMessageRecord(rec, it.m, headers)
			if d := it.m.dead(); fr.clusterVersion >= RedriveVersion && d != nil {
				rec.DeadLetteredMs, rec.DeadLetteredIndex = d.atMs, d.atIndex
			}
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
		if fq.recent != nil {
			fq.recent.Ascend(func(e recentEntry) bool {
				e.record(recent)
				err = put(recent)
				return err == nil
			})
			if err != nil {
				return err
			}
		}
	}
	if fr.clusterVersion >= AuthVersion {
		if err := put(fr.auth.Record()); err != nil {
			return err
		}
	}
	if fr.deleted != nil {
		var err error
		rec := &fsmv1.DeletedKey{}
		fr.deleted.Ascend(func(d deletedKey) bool {
			rec.Queue, rec.IdempotencyKey, rec.AtMs, rec.Kind = d.queue, d.key, d.atMs, fsmv1.RecentKind_RECENT_KIND_UNSPECIFIED
			if d.kind != recentDeleteQueue {
				// A delete's record stays as version 11 wrote it; other
				// kinds exist only from WriteKeyVersion, which an older
				// build refuses before it could drop the field.
				rec.Kind = d.kind
			}
			err = put(rec)
			return err == nil
		})
		return err
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

// fillMessageRecord overwrites every field of r with m's. Its headers
// map is headers, cleared and refilled, when that is not nil (Stream
// reuses one for every message), else a new one.
func fillMessageRecord(r *fsmv1.MessageRecord, m *message, headers map[string]string) {
	*r = fsmv1.MessageRecord{
		Id: m.id, Payload: m.payload, Headers: m.headersInto(headers), Priority: m.priority,
		FairnessKey: m.fairnessKey(), Weight: m.weight, ThrottleKeys: m.throttleKeys(),
		EnqueuedMs: m.enqueuedMs, VisibleMs: m.visibleMs(), ExpiresMs: m.expiresMs,
		Attempts: m.attempts, LeaseToken: m.leaseToken(), ConsumerId: m.consumerID(),
		DeadlineMs: m.deadlineMs(), OriginQueue: m.origin(), DeadLetterReason: m.dlReason(),
		DedupId: m.dedupID, State: fsmv1.MessageState(m.state), Story: m.story().record(), ConcurrencyKey: m.concurrencyKey(),
	}
}

// messageFromRecord is a snapshot's message with body b, checked; a story
// is refused below HistoryVersion, where no entry records one.
func messageFromRecord(mr *fsmv1.MessageRecord, b *body, clusterVersion uint32) (*message, error) {
	m := &message{
		id: mr.Id, payload: mr.Payload, body: b,
		priority: mr.Priority, weight: max(mr.Weight, 1),
		dedupID: mr.DedupId, enqueuedMs: mr.EnqueuedMs,
		expiresMs: mr.ExpiresMs, attempts: mr.Attempts,
	}
	m.setLease(mr.LeaseToken, mr.ConsumerId, mr.DeadlineMs)
	m.setVisible(mr.VisibleMs)
	if mr.Story != nil && clusterVersion < HistoryVersion {
		return nil, fmt.Errorf("%w: message %d has a story at cluster version %d", ErrInvalid, mr.Id, clusterVersion)
	}
	st, err := loadStory(mr.Story, mr.Id)
	if err != nil {
		return nil, err
	}
	m.setDeadLetter(mr.OriginQueue, mr.DeadLetterReason)
	m.setStory(st)
	switch mr.State {
	case fsmv1.MessageState_MESSAGE_STATE_READY, fsmv1.MessageState_MESSAGE_STATE_DELAYED, fsmv1.MessageState_MESSAGE_STATE_LEASED:
		m.state = msgState(mr.State)
	default:
		return nil, fmt.Errorf("%w: message %d has unknown state %d", ErrInvalid, mr.Id, mr.State)
	}
	if m.state == stateLeased && m.leaseToken() == 0 {
		return nil, fmt.Errorf("%w: leased message %d has no lease token", ErrInvalid, mr.Id)
	}
	return m, nil
}

// Index is the log index the copy was frozen at.
func (fr *Frozen) Index() uint64 { return fr.index }

// Digest hashes the canonical serialisation of the frozen state (SHA-256,
// hex).
func (fr *Frozen) Digest() (string, error) {
	h := sha256.New()
	bw := bufio.NewWriterSize(h, 64<<10)
	if err := fr.Canonical(bw); err != nil {
		return "", err
	}
	if err := bw.Flush(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Load reads a snapshot written by Stream (of this build or an older one)
// and rebuilds every index; the result passes Verify. A snapshot of a
// newer format is ErrNewerVersion; anything malformed is ErrInvalid.
func Load(r *bufio.Reader) (*Store, error) { return LoadReporting(r, nil) }

// LoadReporting is Load adding each message it has restored to messages
// (which may be nil), for a caller that reports on a long restore.
func LoadReporting(r *bufio.Reader, messages *atomic.Int64) (*Store, error) {
	s := New()
	if err := s.load(r, messages); err != nil {
		return nil, err
	}
	if err := s.Verify(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) load(r *bufio.Reader, messages *atomic.Int64) error {
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
		s.clusterVersion = 1
	case hdr.Version >= snapshotV2 && hdr.ClusterVersion > MaxLogVersion:
		return fmt.Errorf("%w: snapshot of a cluster at log version %d, this build applies versions up to %d; upgrade this node's raftq binary",
			ErrNewerVersion, hdr.ClusterVersion, MaxLogVersion)
	case hdr.Version == snapshotV2 && hdr.ClusterVersion >= 2 && hdr.ClusterVersion < keyOrderVersion,
		hdr.Version == snapshotV3 && hdr.ClusterVersion >= keyOrderVersion && hdr.ClusterVersion < elapsedTimeVersion:
		s.clusterVersion = hdr.ClusterVersion
	case hdr.Version == snapshotV4 && hdr.ClusterVersion >= elapsedTimeVersion && hdr.ClusterVersion < AuthVersion,
		hdr.Version == snapshotV5 && hdr.ClusterVersion >= AuthVersion && hdr.ClusterVersion < recentVersion,
		hdr.Version == snapshotV6 && hdr.ClusterVersion >= recentVersion && hdr.ClusterVersion < DeleteKeyVersion,
		hdr.Version == snapshotV7 && hdr.ClusterVersion >= DeleteKeyVersion:
		s.clusterVersion = hdr.ClusterVersion
		s.leader = leaderClock{known: true, term: hdr.LeaderTerm, nowMs: hdr.LeaderNowMs}
	default:
		return fmt.Errorf("%w: snapshot version %d with cluster version %d", ErrInvalid, hdr.Version, hdr.ClusterVersion)
	}
	switch {
	case hdr.MaxQueuedBytes < 0 || hdr.MaxQueuedBytes > 0 && s.clusterVersion < AdmitVersion:
		return fmt.Errorf("%w: max_queued_bytes %d at cluster version %d", ErrInvalid, hdr.MaxQueuedBytes, s.clusterVersion)
	case hdr.DeletedCount > 0 && hdr.Version < snapshotV7:
		return fmt.Errorf("%w: deleted keys in a format-%d snapshot", ErrInvalid, hdr.Version)
	case hdr.MaxQueues < 0 || hdr.MaxQueues > 0 && s.clusterVersion < GuardVersion:
		return fmt.Errorf("%w: max_queues %d at cluster version %d", ErrInvalid, hdr.MaxQueues, s.clusterVersion)
	case hdr.DeadTimeFromMs != 0 && s.clusterVersion < RedriveVersion:
		return fmt.Errorf("%w: dead_time_from_ms at cluster version %d", ErrInvalid, s.clusterVersion)
	}
	switch {
	case s.clusterVersion >= HandoverVersion && len(hdr.GetMetaFounders()) > 0:
		// None in a canonical stream (a backup's): a restore founds
		// meta anew (RefoundMeta).
		fs, err := checkFounders(hdr.GetMetaFounders())
		if err != nil {
			return fmt.Errorf("snapshot header: %w", err)
		}
		s.metaFounders = fs
	case len(hdr.GetMetaFounders()) > 0:
		return fmt.Errorf("%w: meta founders at cluster version %d", ErrInvalid, s.clusterVersion)
	}
	s.deadTimeFromMs = hdr.DeadTimeFromMs
	s.maxQueuedBytes, s.maxQueues = hdr.MaxQueuedBytes, hdr.MaxQueues
	s.lastNow, s.appliedIndex = hdr.LastNowMs, hdr.AppliedIndex
	type pendingDLQ struct {
		q *queue
		m *message
	}
	var dlqMsgs []pendingDLQ // indexed after every queue exists, so origin counters land
	// Messages and dedup entries, nearly all of a large snapshot, are
	// decoded ahead on other cores while this goroutine indexes.
	msgRecords := newRecordDecoder(decodeMessageRecord)
	dedupRecords := newRecordDecoder(decodeDedupEntry)
	keyOrders := map[*queue][]*fsmv1.KeyOrder{}
	for i := uint64(0); i < hdr.QueueCount; i++ {
		rec := &fsmv1.QueueRecord{}
		if err := opts.UnmarshalFrom(r, rec); err != nil {
			return fmt.Errorf("%w: queue record: %v", ErrInvalid, err)
		}
		if err := ValidateQueueName(rec.Name); err != nil {
			return err
		}
		if _, dup := s.queues[rec.Name]; dup {
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
		s.queues[q.name] = q
		if err := s.loadPauses(q, rec.Pauses); err != nil {
			return err
		}
		if len(rec.KeyOrder) > 0 && hdr.Version < snapshotV3 {
			return fmt.Errorf("%w: key order in a format-%d snapshot", ErrInvalid, hdr.Version)
		}
		keyOrders[q] = rec.KeyOrder
		if len(rec.Redrives) > 0 && s.clusterVersion < RedriveVersion || len(rec.Redrives) > MaxRedriveJobs {
			return fmt.Errorf("%w: %d redrive jobs of %s at cluster version %d", ErrInvalid, len(rec.Redrives), q.name, s.clusterVersion)
		}
		for _, jr := range rec.Redrives {
			j, err := loadJob(q, jr)
			if err != nil {
				return err
			}
			if n := len(q.redrives); n > 0 && q.redrives[n-1].id >= j.id {
				return fmt.Errorf("%w: redrive jobs of %s out of order", ErrInvalid, q.name)
			}
			q.redrives = append(q.redrives, j)
			s.redriving[q.name] = struct{}{}
		}
		var last uint64
		for lm, err := range msgRecords.records(r, rec.MessageCount) {
			if err != nil {
				return fmt.Errorf("%w: message record: %v", ErrInvalid, err)
			}
			mr := &lm.rec
			if messages != nil {
				messages.Add(1)
			}
			if mr.Id <= last {
				return fmt.Errorf("%w: message ids out of order in %s", ErrInvalid, q.name)
			}
			last = mr.Id
			m, err := messageFromRecord(mr, q.packedBodyFor(mr.Priority, lm.headers, mr.FairnessKey, mr.ThrottleKeys, mr.ConcurrencyKey), s.clusterVersion)
			if err != nil {
				return err
			}
			if mr.DeadLetteredIndex != 0 || mr.DeadLetteredMs != 0 {
				if m.origin() == "" && m.dlReason() == "" || s.clusterVersion < RedriveVersion || mr.DeadLetteredIndex == 0 {
					return fmt.Errorf("%w: message %d has a dead-letter time but no dead-letter record at cluster version %d", ErrInvalid, mr.Id, s.clusterVersion)
				}
				d := m.dead() // its own, made by messageFromRecord
				d.atMs, d.atIndex = mr.DeadLetteredMs, mr.DeadLetteredIndex
			}
			if m.origin() != "" {
				dlqMsgs = append(dlqMsgs, pendingDLQ{q, m})
				continue
			}
			s.put(q, nil, m)
		}
		// Collected, then both indexes built at once (dedupload.go).
		var dedups dedupChunks
		for de, err := range dedupRecords.records(r, rec.DedupCount) {
			if err != nil {
				return fmt.Errorf("%w: dedup record: %v", ErrInvalid, err)
			}
			dedups.add(de.entry)
		}
		s.loadDedups(q, &dedups)
		if rec.RecentCount > 0 && hdr.Version < snapshotV6 {
			return fmt.Errorf("%w: recent entries in a format-%d snapshot", ErrInvalid, hdr.Version)
		}
		for j := uint64(0); j < rec.RecentCount; j++ {
			re := &fsmv1.RecentEntry{}
			if err := opts.UnmarshalFrom(r, re); err != nil {
				return fmt.Errorf("%w: recent record: %v", ErrInvalid, err)
			}
			if err := s.loadRecent(q, re); err != nil {
				return err
			}
		}
	}
	for _, p := range dlqMsgs {
		s.put(p.q, nil, p.m)
	}
	if hdr.Version >= snapshotV3 {
		// Indexing derived an order from message ids; the recorded one
		// is the live replica's (keyorder.go).
		for _, name := range s.sortedQueueNames() {
			q := s.queues[name]
			if err := s.loadKeyOrder(q, keyOrders[q]); err != nil {
				return err
			}
		}
	}
	for _, q := range s.queues {
		if d := q.cfg.DeadLetterQueue; d != "" {
			if dq := s.queues[d]; dq == nil || !dq.isDLQ {
				return fmt.Errorf("%w: %s names dead-letter queue %s which is missing or not a DLQ", ErrInvalid, q.name, d)
			}
		}
	}
	if hdr.Version >= snapshotV5 {
		rec := &fsmv1.AuthRecord{}
		if err := opts.UnmarshalFrom(r, rec); err != nil {
			return fmt.Errorf("%w: auth record: %v", ErrInvalid, err)
		}
		a, err := acl.Load(rec)
		if err != nil {
			return err
		}
		s.auth = a
	}
	for j := uint64(0); j < hdr.DeletedCount; j++ {
		rec := &fsmv1.DeletedKey{}
		if err := opts.UnmarshalFrom(r, rec); err != nil {
			return fmt.Errorf("%w: deleted key record: %v", ErrInvalid, err)
		}
		if err := s.loadDeleted(rec, hdr.ClusterVersion); err != nil {
			return err
		}
	}
	switch _, err := r.ReadByte(); {
	case err == nil:
		return fmt.Errorf("%w: trailing data after snapshot", ErrInvalid)
	case !errors.Is(err, io.EOF):
		// The reader's last word, e.g. a checksum that did not match.
		return fmt.Errorf("%w: after the last record: %w", ErrInvalid, err)
	}
	return nil
}

// ClusterVersion is the cluster version of the frozen state (what decides
// its snapshot format).
func (fr *Frozen) ClusterVersion() uint32 { return fr.clusterVersion }
