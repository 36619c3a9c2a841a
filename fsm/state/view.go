package state

import (
	"fmt"
	"strings"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// delivery projects m; off converts the state's instants to the clock of
// the leader that proposed the last entry (clock.go), the one callers
// compare them with.
func (q *queue) delivery(m *message, off int64) *Delivery {
	d := &Delivery{
		ID:               m.id,
		Queue:            q.name,
		Payload:          m.payload,
		Headers:          m.headers(),
		Priority:         m.priority,
		FairnessKey:      m.fairnessKey(),
		Weight:           m.weight,
		ThrottleKeys:     m.throttleKeys(),
		Attempt:          m.attempts,
		EnqueuedMs:       m.enqueuedMs + off,
		OriginQueue:      m.origin(),
		DeadLetterReason: m.dlReason(),
		LastError:        m.story().lastErr(),
		History:          m.story().history(off),
	}
	if m.state == stateLeased {
		d.LeaseToken = m.leaseToken()
		d.LeaseDeadlineMs = m.deadlineMs() + off
	}
	return d
}

func (s *Store) info(q *queue) *QueueInfo {
	qi := &QueueInfo{
		Name:              q.name,
		Config:            proto.Clone(q.cfg).(*fsmv1.QueueConfig),
		IsDeadLetterQueue: q.isDLQ,
		Stats:             q.stats(),
		Redrives:          q.redriveInfo(s.leader.offset(s.lastNow)),
	}
	s.addPauses(q, qi)
	return qi
}

func (q *queue) stats() QueueStats {
	return QueueStats{
		Ready:         q.ready,
		Delayed:       q.delayed,
		InFlight:      q.inFlight,
		DeadLettered:  q.deadLettered,
		EnqueuedTotal: q.enqueuedTotal,
		AckedTotal:    q.ackedTotal,
		NackedTotal:   q.nackedTotal,
		ExpiredTotal:  q.expiredTotal,
		Bytes:         q.bytes,
		RecentSettled: int64(q.recent.Len()),
		DedupEntries:  int64(q.dedup.Len()),
		DedupBytes:    q.dedupBytes,
	}
}

// GetQueue reports a queue's effective config and stats (consumers are the
// scheduler's to fill in).
func (v View) GetQueue(name string) (*QueueInfo, error) {
	q := v.s.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	return v.s.info(q), nil
}

// ListQueues lists queues whose name starts with prefix, sorted by name.
func (v View) ListQueues(prefix string) []*QueueInfo {
	var out []*QueueInfo
	for _, name := range v.s.sortedQueueNames() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, v.s.info(v.s.queues[name]))
		}
	}
	return out
}

// HasQueue reports ErrQueueNotFound for an unknown queue; a cheap check
// for hot paths that need no config.
func (v View) HasQueue(name string) error {
	if v.s.queues[name] == nil {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	return nil
}

// CheckEmpty reports ErrNotEmpty for a queue that holds messages or has
// messages in its dead-letter queue (DeleteQueue's if_empty condition),
// ErrQueueNotFound for an unknown one.
func (v View) CheckEmpty(name string) error {
	q := v.s.queues[name]
	if q == nil {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	return q.checkEmpty()
}

// QueueConfig returns a queue's effective config (a copy).
func (v View) QueueConfig(name string) (*fsmv1.QueueConfig, error) {
	q := v.s.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	return proto.Clone(q.cfg).(*fsmv1.QueueConfig), nil
}

// CheckEnqueue is the leader's check before proposing an enqueue: every
// message against the queue's limits, then admission (admit) by
// max_depth, max_bytes and the cluster's max_queued_bytes. Below cluster
// version AdmitVersion, which has no such setting, nodeMax (the node's
// --max-queued-bytes; 0 = unlimited) stands in for it. From that version
// the same rule runs again as the entry applies; this is the cheap early
// refusal. One read lock, no copies: it runs for every Enqueue call.
func (v View) CheckEnqueue(name string, msgs []*fsmv1.EnqueueMessage, nodeMax int64) error {
	q := v.s.queues[name]
	if q == nil {
		return fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	for i, m := range msgs {
		if err := ValidateMessage(i, m, q.cfg); err != nil {
			return err
		}
	}
	maxHeld := nodeMax
	if v.s.clusterVersion >= AdmitVersion {
		maxHeld = v.s.maxQueuedBytes
	}
	return v.s.admit(q, msgs, maxHeld)
}

// TotalBytes is what the messages held across all queues cost
// (MessageCost).
func (v View) TotalBytes() int64 {
	return v.s.totalBytes
}

// Peek lists up to limit ready messages in the order a fresh scheduler
// would deliver them (ignoring throttles): highest priority first, then
// weighted round-robin across fairness keys, FIFO within a key. With
// deadLetter it browses the queue's DLQ (messages that came from it).
func (v View) Peek(name string, limit int, deadLetter bool) ([]*Delivery, error) {
	q := v.s.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	var out []*Delivery
	if deadLetter {
		dlq := v.s.queues[q.cfg.DeadLetterQueue]
		if dlq == nil {
			return nil, nil
		}
		dlq.msgs.Ascend(func(it msgItem) bool {
			if it.m.origin() == q.name {
				out = append(out, dlq.delivery(it.m, v.offset()))
			}
			return len(out) < limit
		})
		return out, nil
	}
	for _, l := range q.levels {
		for _, m := range peekLevel(q, l, limit-len(out)) {
			out = append(out, q.delivery(m, v.offset()))
		}
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}

// peekLevel simulates deficit round-robin over the level's keys from a
// fresh start.
func peekLevel(q *queue, l *level, limit int) []*message {
	type cursor struct {
		kq   *keyQueue
		last uint64
		left int
	}
	var ring []*cursor
	// Paused keys too: Peek shows what waits, in the order it would go.
	l.eachKey(func(r keyRef) bool {
		kq := l.keys[r.key]
		ring = append(ring, &cursor{kq: kq, left: kq.ids.Len()})
		return true
	})
	quantum := int(q.cfg.FairnessQuantum)
	var out []*message
	for len(out) < limit && len(ring) > 0 {
		next := ring[:0]
		for _, c := range ring {
			credit := int(c.kq.weight) * quantum
			for credit > 0 && c.left > 0 && len(out) < limit {
				c.kq.ids.AscendGreaterOrEqual(c.last+1, func(id uint64) bool { c.last = id; return false })
				out = append(out, q.get(c.last))
				c.left--
				credit--
			}
			if c.left > 0 {
				next = append(next, c)
			}
		}
		ring = next
	}
	return out
}

// View is a read-only window on the store, valid only while the caller
// holds off writers (fsm.Reader.Read).
type View struct{ s *Store }

// KeyInfo describes one active fairness key at one priority.
type KeyInfo struct {
	Key    string
	Seq    uint64 // activation order: a key that empties and refills gets a larger one
	Weight uint32
	Ready  int
	// GroupGen changes when the key gains a throttle group (its ready
	// messages carrying a set of throttle keys none of them had).
	GroupGen uint64
}

// ReadyMessage is what the scheduler needs to choose a message.
type ReadyMessage struct {
	ID             uint64
	ThrottleKeys   []string
	ConcurrencyKey string
}

// QueueView is one queue inside a View.
type QueueView struct {
	s *Store
	q *queue
}

// Queue returns the named queue, if present.
func (v View) Queue(name string) (QueueView, bool) {
	q := v.s.queues[name]
	return QueueView{v.s, q}, q != nil
}

// QueueNames lists every queue, sorted.
func (v View) QueueNames() []string { return v.s.sortedQueueNames() }

// Config is the effective config; callers must not modify it.
func (qv QueueView) Config() *fsmv1.QueueConfig { return qv.q.cfg }

// Ready is the number of ready messages.
func (qv QueueView) Ready() int64 { return qv.q.ready }

// Stats are the queue's counters (no config copy: cheap enough for a
// metrics scrape over every queue).
func (qv QueueView) Stats() QueueStats { return qv.q.stats() }

// AppliedEvents counts the grants and dead-letterings of the queue's
// messages this replica has applied since it loaded its state. They are
// not replicated state (neither snapshotted nor digested): metrics only.
func (qv QueueView) AppliedEvents() (granted, deadLettered int64) {
	return qv.q.grantedApplied, qv.q.deadLetteredApplied
}

// OldestReadyMs is the enqueue time of the oldest ready message, taken
// over the head of each fairness key's FIFO (ids grow with the log, so a
// key's head is its oldest): O(active keys), no walk over messages. ok is
// false when nothing is ready. Like every instant a view hands out, it is
// on the clock of the leader that proposed the last applied entry
// (clock.go).
func (qv QueueView) OldestReadyMs() (ms int64, ok bool) {
	for _, l := range qv.q.levels {
		l.eachKey(func(r keyRef) bool {
			id, found := l.keys[r.key].ids.Min()
			if m := qv.q.get(id); found && m != nil && (!ok || m.enqueuedMs < ms) {
				ms, ok = m.enqueuedMs, true
			}
			return true
		})
	}
	if !ok {
		return 0, false
	}
	return ms + qv.s.leader.offset(qv.s.lastNow), true
}

// Priorities appends the priorities that have ready messages, highest first.
func (qv QueueView) Priorities(dst []int32) []int32 {
	for _, l := range qv.q.levels {
		dst = append(dst, l.priority)
	}
	return dst
}

// NextKey returns the active key at prio with the smallest Seq > afterSeq
// among those with an open message: a key whose every ready message is
// held by its concurrency key's cap is not walked (concurrency.go).
func (qv QueueView) NextKey(prio int32, afterSeq uint64) (KeyInfo, bool) {
	l := qv.q.level(prio, false)
	if l == nil {
		return KeyInfo{}, false
	}
	var out KeyInfo
	found := false
	l.open.AscendGreaterOrEqual(keyRef{seq: afterSeq + 1}, func(r keyRef) bool {
		kq := l.keys[r.key]
		out = KeyInfo{Key: kq.key, Seq: kq.seq, Weight: kq.weight, Ready: kq.ids.Len(), GroupGen: kq.groupGen}
		found = true
		return false
	})
	return out, found
}

// Key returns one fairness key's info at prio.
func (qv QueueView) Key(prio int32, key string) (KeyInfo, bool) {
	l := qv.q.level(prio, false)
	if l == nil {
		return KeyInfo{}, false
	}
	kq := l.keys[key]
	if kq == nil || qv.q.keyHeld(key) {
		// A paused key is out of the ring: the scheduler must not resume it.
		return KeyInfo{}, false
	}
	return KeyInfo{Key: kq.key, Seq: kq.seq, Weight: kq.weight, Ready: kq.ids.Len(), GroupGen: kq.groupGen}, true
}

// NextReady returns the key's ready message with the smallest id > afterID.
func (qv QueueView) NextReady(prio int32, key string, afterID uint64) (ReadyMessage, bool) {
	l := qv.q.level(prio, false)
	if l == nil {
		return ReadyMessage{}, false
	}
	kq := l.keys[key]
	if kq == nil {
		return ReadyMessage{}, false
	}
	var id uint64
	found := false
	kq.ids.AscendGreaterOrEqual(afterID+1, func(v uint64) bool { id, found = v, true; return false })
	if !found {
		return ReadyMessage{}, false
	}
	m := qv.q.get(id)
	return ReadyMessage{ID: id, ThrottleKeys: m.throttleKeys(), ConcurrencyKey: m.concurrencyKey()}, true
}

// ThrottleGroups appends the names of the key's throttle groups at prio:
// its ready messages split by the exact throttle keys they carry. Every
// message of a group is admitted or refused by the same buckets, so a
// scheduler that finds a group's next message throttled can skip the
// group's whole backlog. The order is unspecified.
func (qv QueueView) ThrottleGroups(prio int32, key string, dst []string) []string {
	l := qv.q.level(prio, false)
	if l == nil {
		return dst
	}
	kq := l.keys[key]
	if kq == nil {
		return dst
	}
	for g := range kq.groups {
		dst = append(dst, g)
	}
	return dst
}

// NextInGroup returns the ready message with the smallest id > afterID
// among the key's messages of one throttle group.
func (qv QueueView) NextInGroup(prio int32, key, group string, afterID uint64) (ReadyMessage, bool) {
	l := qv.q.level(prio, false)
	if l == nil {
		return ReadyMessage{}, false
	}
	kq := l.keys[key]
	if kq == nil {
		return ReadyMessage{}, false
	}
	gt := kq.groups[group]
	if gt == nil {
		return ReadyMessage{}, false
	}
	var id uint64
	found := false
	gt.AscendGreaterOrEqual(afterID+1, func(v uint64) bool { id, found = v, true; return false })
	if !found {
		return ReadyMessage{}, false
	}
	m := qv.q.get(id)
	return ReadyMessage{ID: id, ThrottleKeys: m.throttleKeys(), ConcurrencyKey: m.concurrencyKey()}, true
}

// LeasesHeld counts the leases a consumer holds across queues.
func (v View) LeasesHeld(consumerID string) int { return len(v.s.consumers[consumerID]) }

// Lease says who holds message id of queue under which token; ok is false
// when the message is not leased (or does not exist).
func (v View) Lease(queue string, id uint64) (consumerID string, token uint64, ok bool) {
	q := v.s.queues[queue]
	if q == nil {
		return "", 0, false
	}
	m := q.get(id)
	if m == nil || m.state != stateLeased {
		return "", 0, false
	}
	return m.consumerID(), m.leaseToken(), true
}

// HoldsLease reports whether consumerID holds the lease of message id of
// queue.
func (v View) HoldsLease(consumerID, queue string, id uint64) bool {
	_, ok := v.s.consumers[consumerID][queueMsg{queue: queue, id: id}]
	return ok
}

// Now is the FSM clock (clock.go), not any node's.
func (v View) Now() int64 { return v.s.lastNow }

// offset converts the state's instants to the clock of the leader that
// proposed the last applied entry (0 before log version 4).
func (v View) offset() int64 { return v.s.leader.offset(v.s.lastNow) }

// NextDue is the earliest instant at which the passage of time changes
// state (a delayed message becomes ready or a TTL passes): the scheduler
// proposes a Tick then. Like every instant the view returns, it is on the
// clock of the leader that proposed the last applied entry, which on a
// leader that has applied an entry of its own term is its clock.
func (v View) NextDue() (int64, bool) {
	var at int64
	found := false
	note := func(t int64, ok bool) {
		if ok && (!found || t < at) {
			at, found = t, true
		}
	}
	d, okD := v.s.delayed.Min()
	note(d.at, okD)
	t, okT := v.s.ttl.Min()
	note(t.at, okT)
	// A timed pause's end (pause.go): the Tick then ends it.
	p, okP := v.s.pauseExp.Min()
	note(p.at, okP)
	if !found {
		return 0, false
	}
	return at + v.offset(), true
}

// SweepPending reports whether time-driven work is due and not yet done
// (log version 13 bounds what one entry does: sweep.go). The leader
// proposes Ticks while it holds, whatever NextDue says: the work is due
// already, and a dedup expiry or a recent outcome's lapse has no NextDue.
func (v View) SweepPending() bool { return v.s.SweepPending() }

// NextLeaseDeadline is the earliest lease deadline (on the leader's clock,
// as NextDue).
func (v View) NextLeaseDeadline() (int64, bool) {
	r, ok := v.s.leases.Min()
	return r.at + v.offset(), ok
}

// ExpiredLeases lists up to max leases whose deadline is <= nowMs (on the
// leader's clock, as NextDue), earliest first. The state decides expiry on
// its own clock (Tx.Expire); this is the leader's estimate of it.
func (v View) ExpiredLeases(nowMs int64, max int) []*fsmv1.Ref {
	var out []*fsmv1.Ref
	cutoff := nowMs - v.offset()
	v.s.leases.Ascend(func(r timedRef) bool {
		if r.at > cutoff || len(out) >= max {
			return false
		}
		m := v.s.queues[r.queue].get(r.id)
		out = append(out, &fsmv1.Ref{Queue: r.queue, MessageId: r.id, LeaseToken: m.leaseToken()})
		return true
	})
	return out
}

// View returns a read-only view of the store.
func (s *Store) View() View { return View{s} }
