package state

import (
	"fmt"
	"slices"
	"strings"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// Tx applies one log entry's command to the store, by the rules of the
// log version the entry was proposed under. A rule that changes in log
// version N branches on tx.version >= N, so an old log replays as it did.
// Each method returns the command's typed result; a whole-command error
// means nothing changed.
type Tx struct {
	s       *Store
	index   uint64 // the entry's Raft index: ids and tokens derive from it
	version uint32
	stampMs int64 // the entry's now_ms: its leader's clock, for durations only
	touched *Touched
}

// Rollback undoes grants that were never pushed: the attempt is not counted.
func (tx *Tx) Rollback(refs []*fsmv1.Ref) *ItemsResult { return tx.forRefs(refs, tx.rollbackOne) }

// Ack deletes acknowledged messages. From log version 7 it records each
// token it settled, and an ack of a token it already settled (a retry
// whose first answer was lost) answers OK and changes nothing.
func (tx *Tx) Ack(refs []*fsmv1.Ref) *ItemsResult {
	res := &ItemsResult{Items: make([]error, len(refs))}
	for i, r := range refs {
		q, m, err := tx.lookupLease(r)
		switch {
		case err == nil:
			err = tx.ackOne(q, m)
			tx.settleAck(q, r, m)
		case tx.settledBefore(recentAck, r):
			err = nil
		}
		res.Items[i] = err
	}
	return res
}

// AckGrant applies an Ack that carries grants (log version 10): first the
// acks, exactly as Ack, then the grants, exactly as a LeaseGrant command
// of its own would in the next entry. Too many grants fail the whole
// command before anything changes.
func (tx *Tx) AckGrant(c *fsmv1.Ack) Result {
	if len(c.GetGrants()) >= maxMessagesPerEntry {
		return failed(fmt.Errorf("%w: too many grants", ErrInvalid))
	}
	acked := tx.Ack(c.GetRefs())
	granted := tx.Grant(&fsmv1.LeaseGrant{Grants: c.GetGrants()})
	return &AckGrantResult{Acked: acked, Granted: granted}
}

// SetClusterVersion raises the cluster version. It never lowers it (a
// late or repeated proposal changes nothing) and never raises it past the
// entry's own version: an entry cannot vouch for rules newer than its own.
// Reaching keyOrderVersion makes every replica's key order canonical.
func (tx *Tx) SetClusterVersion(c *fsmv1.SetClusterVersion) *Done {
	v := c.GetVersion()
	switch {
	case v > tx.version:
		return failed(fmt.Errorf("%w: cluster version %d proposed in a version-%d entry", ErrInvalid, v, tx.version))
	case v <= tx.s.clusterVersion:
		return failed(fmt.Errorf("%w: cluster version is already %d, not raised to %d", ErrInvalid, tx.s.clusterVersion, v))
	}
	if c.GetMaxQueuedBytes() < 0 {
		return failed(fmt.Errorf("%w: max_queued_bytes is negative (%d)", ErrInvalid, c.GetMaxQueuedBytes()))
	}
	if tx.version >= AdmitVersion && tx.s.clusterVersion < AdmitVersion && v >= AdmitVersion {
		// The cluster setting starts from the proposing leader's default
		// (the smallest voter's memory limit); an older entry never has it.
		tx.s.maxQueuedBytes = c.GetMaxQueuedBytes()
	}
	if tx.version >= GuardVersion && tx.s.clusterVersion < GuardVersion && v >= GuardVersion {
		// Bounded from the start, on every replica alike.
		tx.s.maxQueues = DefaultMaxQueues
	}
	if tx.version >= RedriveVersion && tx.s.clusterVersion < RedriveVersion && v >= RedriveVersion {
		// Messages dead-lettered before now have no time of their own:
		// they count as dead-lettered now, never older (redrive.go).
		tx.s.deadTimeFromMs = tx.s.lastNow
	}
	if tx.version >= HandoverVersion && tx.s.clusterVersion < HandoverVersion && v >= HandoverVersion {
		// The meta group's first configuration, the same on every
		// replica: each founder bootstraps meta with it (handover.go).
		fs, err := checkFounders(c.GetMetaFounders())
		if err != nil {
			return failed(err)
		}
		tx.s.metaFounders = fs
	}
	if tx.s.clusterVersion < keyOrderVersion && v >= keyOrderVersion {
		// Key order becomes state that digests compare: start it from
		// the same place on every replica (keyorder.go).
		tx.s.canonicalKeyOrder()
	}
	tx.s.clusterVersion = v
	return &Done{}
}

func (tx *Tx) CreateQueue(c *fsmv1.CreateQueue) *QueueResult {
	if err := ValidateQueueName(c.GetName()); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	k, err := tx.writeKey(recentCreateQueue, c.GetName(), c.GetIdempotencyKey())
	if err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if tx.repeat(k) {
		return tx.repeatedQueue(c.GetName())
	}
	if err := tx.validateConfig(c.GetConfig()); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if _, ok := tx.s.queues[c.Name]; ok {
		return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueExists, c.Name)}}
	}
	raw := tx.stripConcurrency(c.GetConfig())
	dlqName := raw.GetDeadLetterQueue()
	named := dlqName != ""
	if dlqName == "" {
		dlqName = c.Name + DLQSuffix
		if len(dlqName) > MaxQueueNameLen {
			// Refused as ever (the DLQ's name is checked below); said
			// plainly, since the caller never typed that name.
			return &QueueResult{Done: Done{Err: fmt.Errorf("%w: queue name is %d characters; its default dead-letter queue %s%s would be %d, past the %d-character limit: use at most %d characters, or set config.dead_letter_queue",
				ErrInvalid, len(c.Name), "NAME", DLQSuffix, len(dlqName), MaxQueueNameLen, MaxQueueNameLen-len(DLQSuffix))}}
		}
	}
	if dlqName == c.Name {
		return &QueueResult{Done: Done{Err: fmt.Errorf("%w: a queue cannot be its own dead-letter queue", ErrInvalid)}}
	}
	if err := ValidateQueueName(dlqName); err != nil {
		return &QueueResult{Done: Done{Err: fmt.Errorf("dead-letter queue name: %w", err)}}
	}
	dlq := tx.s.queues[dlqName]
	if dlq != nil && !dlq.isDLQ {
		// What passed its TTL while it was an ordinary queue goes to its
		// own DLQ first, as after the sweep (time's work, done even if the
		// create is refused, as the sweep would have done it).
		tx.settleDue(dlq)
		if tx.version >= GuardVersion {
			if err := tx.checkConvert(c.Name, dlq, named); err != nil {
				return &QueueResult{Done: Done{Err: err}}
			}
		} else if own := tx.s.queues[dlq.cfg.DeadLetterQueue]; own != nil && (own.msgs.Len() > 0 || tx.s.servedBy(own.name) > 1 || !own.autoDLQ) {
			// An existing ordinary queue becomes a shared DLQ only if its own
			// DLQ is empty, so no message would be stranded or dead-lettered twice.
			return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s is a regular queue whose own dead-letter queue is in use", ErrInvalid, dlqName)}}
		}
	}
	added := 1
	if dlq == nil {
		added++
	}
	if err := tx.checkQueueCount(added); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if dlq == nil {
		dlq = newQueue(dlqName)
		dlq.raw = &fsmv1.QueueConfig{}
		dlq.autoDLQ = true
		tx.s.queues[dlqName] = dlq
	}
	tx.s.makeDLQ(dlq)
	q := newQueue(c.Name)
	q.raw = &fsmv1.QueueConfig{}
	if raw != nil {
		q.raw = proto.Clone(raw).(*fsmv1.QueueConfig)
	}
	q.raw.DeadLetterQueue = dlqName
	q.cfg = effectiveConfig(q.raw, dlqName)
	tx.s.queues[c.Name] = q
	tx.touched.add(q.name)
	tx.done(k)
	return &QueueResult{Queue: tx.s.info(q)}
}

// checkConvert is GuardVersion's condition for turning dlq, an existing
// ordinary queue, into the dead-letter queue of a new queue: it must have
// been named on purpose (config.dead_letter_queue, which the edge checks
// against the caller's grants on it, never a default name that happens to
// exist), hold no message (ready, delayed or leased: a leased one has a
// consumer) and have none in its own dead-letter queue, and that one must
// be the empty automatic DLQ only it uses (makeDLQ drops it). A queue in
// use would silently stop enforcing its limits, lose its own DLQ and take
// in another queue's dead letters.
func (tx *Tx) checkConvert(name string, dlq *queue, named bool) error {
	switch {
	case !named:
		return fmt.Errorf("%w: the default dead-letter queue of %s, %s, is an existing ordinary queue; name the dead-letter queue in config.dead_letter_queue",
			ErrInUse, name, dlq.name)
	case dlq.msgs.Len() > 0 || dlq.deadLettered > 0:
		return fmt.Errorf("%w: queue %s holds %d messages (%d ready, %d delayed, %d in flight) and %d dead-lettered: an ordinary queue in use cannot become a dead-letter queue; name an empty queue, a dead-letter queue or a new name",
			ErrInUse, dlq.name, dlq.msgs.Len(), dlq.ready, dlq.delayed, dlq.inFlight, dlq.deadLettered)
	}
	if own := tx.s.queues[dlq.cfg.DeadLetterQueue]; own != nil && (own.msgs.Len() > 0 || tx.s.servedBy(own.name) > 1 || !own.autoDLQ) {
		return fmt.Errorf("%w: queue %s is an ordinary queue whose own dead-letter queue %s is in use (shared, named on purpose or holding messages); it cannot become a dead-letter queue",
			ErrInUse, dlq.name, own.name)
	}
	return nil
}

// validateMask checks an update mask by the entry's version: the
// concurrency paths are unknown before ConcurrencyVersion, as to an older
// build.
func (tx *Tx) validateMask(paths []string) error {
	if err := ValidateMask(paths); err != nil {
		return err
	}
	if tx.version < ConcurrencyVersion {
		for _, p := range paths {
			if f := strings.TrimPrefix(p, "config."); f == "concurrency_limit" || f == "concurrency_limits" {
				return fmt.Errorf("%w: update_mask path %q is not a QueueConfig field", ErrInvalid, p)
			}
		}
	}
	if tx.version < RetryVersion {
		// Older builds refuse "retry" as unknown, listing the paths they
		// know (without the concurrency ones before ConcurrencyVersion).
		fields := olderConfigFields
		if tx.version < ConcurrencyVersion {
			fields = slices.DeleteFunc(slices.Clone(fields), func(f string) bool { return f == "concurrency_limit" || f == "concurrency_limits" })
		}
		return validateMask(paths, fields)
	}
	return nil
}

// validateConfig checks a config a command sets, by the entry's version.
func (tx *Tx) validateConfig(c *fsmv1.QueueConfig) error {
	if err := validateConfig(tx.stripConcurrency(c)); err != nil {
		return err
	}
	if tx.version >= RetryVersion {
		// Older builds do not know the field (the edge refuses it before
		// the cluster reaches the version).
		if err := validateRetry(c.GetRetry()); err != nil {
			return err
		}
	}
	if tx.version >= AdmitVersion {
		return validateDedupWindow(c)
	}
	return nil
}

func (tx *Tx) UpdateQueue(c *fsmv1.UpdateQueue) *QueueResult {
	k, err := tx.writeKey(recentUpdateQueue, c.GetName(), c.GetIdempotencyKey())
	if err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if tx.repeat(k) {
		return tx.repeatedQueue(c.GetName())
	}
	q := tx.s.queues[c.GetName()]
	if q == nil {
		return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetName())}}
	}
	if err := tx.validateMask(c.Mask); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if err := tx.validateConfig(c.GetConfig()); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	raw := mergeConfig(q.raw, tx.stripConcurrency(c.GetConfig()), c.Mask)
	want := raw.DeadLetterQueue
	if q.isDLQ {
		if want != "" {
			return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s is a dead-letter queue and cannot have one", ErrInvalid, q.name)}}
		}
	} else {
		if want == "" {
			want = q.cfg.DeadLetterQueue
		}
		if want != q.cfg.DeadLetterQueue {
			return &QueueResult{Done: Done{Err: fmt.Errorf("%w: dead_letter_queue cannot be changed after creation (delete and recreate the queue)", ErrInvalid)}}
		}
	}
	raw.DeadLetterQueue = want
	q.raw = raw
	q.cfg = effectiveConfig(raw, want)
	q.concSettleAll()
	tx.touched.add(q.name)
	tx.done(k)
	return &QueueResult{Queue: tx.s.info(q)}
}

// DeleteQueue deletes a queue. From log version 11 a delete with an
// idempotency key that succeeded is remembered (deletekeys.go), and its
// repeat answers OK and deletes nothing, even a queue created since.
func (tx *Tx) DeleteQueue(c *fsmv1.DeleteQueue) *Done {
	keyed, err := tx.deleteKeyed(c)
	switch {
	case err != nil:
		return failed(err)
	case keyed && tx.s.deletedBefore(c.GetName(), c.GetIdempotencyKey()):
		return &Done{}
	}
	q := tx.s.queues[c.GetName()]
	if q == nil {
		return failed(fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetName()))
	}
	// A shared DLQ keeps what passed its TTL, as after the sweep, and
	// if_empty sees it where the sweep would have put it.
	tx.settleDue(q)
	if q.isDLQ {
		if users := tx.s.servedBy(q.name); users > 0 {
			return failed(fmt.Errorf("%w: %s is the dead-letter queue of %d queue(s); delete those first", ErrInUse, q.name, users))
		}
	}
	if tx.version >= IfEmptyVersion && c.GetIfEmpty() {
		if err := q.checkEmpty(); err != nil {
			return failed(err)
		}
	}
	tx.s.dropQueue(q)
	tx.touched.add(q.name)
	if dlq := tx.s.queues[q.cfg.DeadLetterQueue]; dlq != nil && !q.isDLQ {
		if dlq.autoDLQ && tx.s.servedBy(dlq.name) == 0 {
			tx.s.dropQueue(dlq)
			tx.touched.add(dlq.name)
		} else {
			// The shared DLQ stays; its messages from the deleted queue
			// can no longer be redriven, so they forget their origin.
			var orphans []*message
			dlq.msgs.Ascend(func(it msgItem) bool {
				if it.m.origin() == q.name {
					orphans = append(orphans, it.m)
				}
				return true
			})
			for _, m := range orphans {
				next := *m
				next.setDeadLetter("", m.dlReason())
				if d, nd := m.dead(), next.dead(); d != nil && d.atIndex != 0 && nd != nil {
					nd.atMs, nd.atIndex = d.atMs, d.atIndex // nd is its own, made by setDeadLetter
				}
				tx.s.put(dlq, m, &next)
			}
		}
	}
	if keyed {
		tx.s.rememberDelete(q.name, c.GetIdempotencyKey())
	}
	return &Done{}
}

func (tx *Tx) PurgeQueue(c *fsmv1.PurgeQueue) *CountResult {
	q := tx.s.queues[c.GetName()]
	if q == nil {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetName())}}
	}
	return tx.idempotent(q, recentPurge, c.GetIdempotencyKey(), func() int64 {
		tx.settleDue(q)
		if q.isDLQ && tx.version >= SweepBudgetVersion && tx.s.SweepPending() {
			// What passed its TTL in the queues it serves is here first.
			for _, name := range tx.s.sortedQueueNames() {
				if f := tx.s.queues[name]; f.cfg.DeadLetterQueue == q.name {
					tx.settleDue(f)
				}
			}
		}
		var victims []*message
		q.msgs.Ascend(func(it msgItem) bool {
			if it.m.state != stateLeased {
				victims = append(victims, it.m)
			}
			return true
		})
		for _, m := range victims {
			tx.s.put(q, m, nil)
		}
		tx.touched.add(q.name)
		return int64(len(victims))
	})
}

func (tx *Tx) Enqueue(c *fsmv1.Enqueue) *EnqueueResult {
	res := &EnqueueResult{Batches: make([]BatchResult, len(c.GetBatches()))}
	pos := uint64(0)
	total := 0
	for _, b := range c.GetBatches() {
		total += len(b.GetMessages())
	}
	if total >= maxMessagesPerEntry {
		return &EnqueueResult{Done: Done{Err: fmt.Errorf("%w: %d messages in one entry, the limit is %d", ErrInvalid, total, maxMessagesPerEntry-1)}}
	}
	now := tx.s.lastNow
	for bi, b := range c.GetBatches() {
		q := tx.s.queues[b.GetQueue()]
		if q == nil {
			res.Batches[bi].Err = fmt.Errorf("%w: %s", ErrQueueNotFound, b.GetQueue())
			pos += uint64(len(b.GetMessages()))
			continue
		}
		if len(b.GetMessages()) == 0 {
			res.Batches[bi].Err = fmt.Errorf("%w: no messages", ErrInvalid)
			continue
		}
		if tx.version < ConcurrencyVersion {
			b = stripConcurrencyKeys(b)
		}
		var bad error
		for i, m := range b.Messages {
			if err := ValidateMessage(i, m, q.cfg); err != nil {
				bad = err
				break
			}
		}
		if bad == nil && tx.version >= AdmitVersion {
			// Admission as the entry applies: every replica decides alike
			// and concurrent proposals cannot overrun a limit.
			bad = tx.s.admit(q, b.Messages, tx.s.maxQueuedBytes)
		}
		if bad != nil {
			res.Batches[bi].Err = bad
			pos += uint64(len(b.Messages))
			continue
		}
		ids := make([]uint64, len(b.Messages))
		for i, em := range b.Messages {
			id := tx.index<<20 | pos
			pos++
			if em.DedupId != "" {
				// Insert first and look at what it replaced: new ids (the
				// common case) cost one tree walk, not a lookup and an insert.
				exp := now + q.cfg.DedupWindowMs
				key := dedupKey(em.DedupId)
				entry := key
				entry.messageID, entry.expiresMs = id, exp
				old, ok := q.dedup.ReplaceOrInsert(entry)
				if ok && old.expiresMs > now {
					q.dedup.ReplaceOrInsert(old) // a duplicate: the original stands
					ids[i] = old.messageID
					continue
				}
				if ok {
					tx.s.dedupExp.Delete(dedupRef{at: old.expiresMs, messageID: old.messageID})
				} else {
					tx.s.addDedup(q, em.DedupId)
				}
				tx.s.dedupExp.ReplaceOrInsert(dedupRef{at: exp, messageID: id, queue: q.name, dedupID: em.DedupId})
			}
			m := &message{
				id:         id,
				payload:    em.Payload,
				body:       q.bodyFor(em.Priority, em.Headers, em.FairnessKey, em.ThrottleKeys, tx.concurrencyKey(em)),
				priority:   em.Priority,
				weight:     max(em.Weight, 1),
				dedupID:    em.DedupId,
				enqueuedMs: now,
			}
			ttl := em.TtlMs
			if ttl == 0 {
				ttl = q.cfg.MessageTtlMs
			}
			if ttl > 0 && !q.isDLQ {
				m.expiresMs = now + ttl
			}
			if em.DelayMs > 0 {
				m.state = stateDelayed
				m.setVisible(now + em.DelayMs)
			}
			tx.s.put(q, nil, m)
			q.enqueuedTotal++
			ids[i] = id
		}
		res.Batches[bi].IDs = ids
		tx.touched.add(q.name)
	}
	return res
}

func (tx *Tx) Grant(c *fsmv1.LeaseGrant) *GrantResult {
	gs := c.GetGrants()
	if len(gs) >= maxMessagesPerEntry {
		return &GrantResult{Done: Done{Err: fmt.Errorf("%w: too many grants", ErrInvalid)}}
	}
	res := &GrantResult{Items: make([]error, len(gs)), Deliveries: make([]*Delivery, len(gs))}
	for i, g := range gs {
		q := tx.s.queues[g.GetQueue()]
		if q == nil {
			res.Items[i] = ErrQueueNotFound
			continue
		}
		m := q.get(g.MessageId)
		if m != nil && tx.version >= SweepBudgetVersion {
			var gone bool
			if m, gone = tx.s.settleGrant(q, m, tx.touched); gone {
				m = nil
			}
		}
		if m == nil {
			res.Items[i] = ErrMessageNotFound
			continue
		}
		if m.state != stateReady || g.ConsumerId == "" {
			res.Items[i] = ErrStaleLease
			continue
		}
		if tx.version >= PauseVersion && q.pausedAt(m.fairnessKey(), tx.s.lastNow) {
			// The state's own rule, carried grants included: no
			// leader's mistake leases a paused queue's or key's message.
			res.Items[i] = fmt.Errorf("%w: queue %s, fairness key %q", ErrPaused, q.name, m.fairnessKey())
			continue
		}
		if tx.version >= ConcurrencyVersion {
			// The cap holds whatever the leader proposed (carried grants
			// included: AckGrant applies them here).
			if err := q.concGrantable(m); err != nil {
				res.Items[i] = err
				continue
			}
		}
		next := *m
		next.state = stateLeased
		var token uint64
		if tx.version >= AuthVersion {
			// The leader's random token: the index alone is public
			// (Status) and would let anyone settle others' leases.
			if g.LeaseToken == 0 {
				res.Items[i] = fmt.Errorf("%w: grant without a lease token", ErrInvalid)
				continue
			}
			token = g.LeaseToken
		} else {
			token = tx.index<<20 | uint64(i)
		}
		var deadline int64
		if tx.version >= elapsedTimeVersion {
			// The deadline the leader computed on its clock, as a
			// duration from the entry's stamp on that same clock.
			deadline = tx.s.lastNow + min(max(g.DeadlineMs-tx.stampMs, 0), MaxDurationMs)
		} else {
			deadline = max(g.DeadlineMs, tx.s.lastNow)
		}
		next.setLease(token, g.ConsumerId, deadline)
		next.attempts++
		if tx.s.history {
			next.setStory(m.story().leased(tx.s.lastNow, &next, grantConsumer(g)))
		}
		tx.s.put(q, m, &next)
		q.grantedApplied++
		res.Deliveries[i] = q.delivery(&next, tx.s.leader.offset(tx.s.lastNow))
		tx.touched.add(q.name)
	}
	return res
}

// lookupLease finds the message a ref names and checks the token.
func (tx *Tx) lookupLease(r *fsmv1.Ref) (*queue, *message, error) {
	q := tx.s.queues[r.GetQueue()]
	if q == nil {
		return nil, nil, ErrQueueNotFound
	}
	m := q.get(r.GetMessageId())
	if m == nil || tx.version >= SweepBudgetVersion && tx.s.leavesForTTL(q, m) {
		return nil, nil, ErrMessageNotFound
	}
	if m.state != stateLeased || m.leaseToken() != r.GetLeaseToken() || r.GetLeaseToken() == 0 {
		return nil, nil, ErrStaleLease
	}
	return q, m, nil
}

func (tx *Tx) forRefs(refs []*fsmv1.Ref, one func(*queue, *message) error) *ItemsResult {
	res := &ItemsResult{Items: make([]error, len(refs))}
	for i, r := range refs {
		q, m, err := tx.lookupLease(r)
		if err == nil {
			err = one(q, m)
		}
		res.Items[i] = err
	}
	return res
}

func (tx *Tx) ackOne(q *queue, m *message) error {
	tx.s.put(q, m, nil)
	q.ackedTotal++
	tx.touched.add(q.name)
	return nil
}

func (tx *Tx) rollbackOne(q *queue, m *message) error {
	next := *m
	next.attempts--
	if tx.s.history {
		next.setStory(m.story().rolledBack())
	}
	tx.s.unlease(q, m, &next, 0, tx.touched)
	return nil
}

func (tx *Tx) expireOne(q *queue, m *message, delayMs int64) error {
	if m.deadlineMs() > tx.s.lastNow {
		return fmt.Errorf("%w: lease has not expired", ErrStaleLease)
	}
	q.expiredTotal++
	tx.s.returnLeased(q, m, delayMs, expiredEnding(), tx.touched)
	return nil
}

func (tx *Tx) Nack(c *fsmv1.Nack) *ItemsResult {
	items := c.GetItems()
	res := &ItemsResult{Items: make([]error, len(items))}
	for i, it := range items {
		if it.GetDelayMs() < 0 || it.GetDelayMs() > MaxDurationMs {
			res.Items[i] = fmt.Errorf("%w: delay_ms out of range", ErrInvalid)
			continue
		}
		if tx.version >= HistoryVersion && len(it.GetReason()) > MaxNackReasonBytes {
			// Kept with the message from this version, so bounded.
			res.Items[i] = fmt.Errorf("%w: reason is %d bytes, the limit is %d", ErrInvalid, len(it.GetReason()), MaxNackReasonBytes)
			continue
		}
		retry := int64(0) // the policy's backoff the leader wrote (version 20)
		if tx.version >= RetryVersion {
			if err := retryDelay("retry_delay_ms", it.GetRetryDelayMs()); err != nil {
				res.Items[i] = err
				continue
			}
			retry = it.GetRetryDelayMs()
		}
		q, m, err := tx.lookupLease(it.GetRef())
		if err != nil {
			if !tx.settledBefore(recentNack, it.GetRef()) {
				res.Items[i] = err
			}
			continue
		}
		tx.settle(q, recentNack, it.GetRef())
		if it.Uncounted && !it.DeadLetter {
			var delay int64
			if tx.version >= GuardVersion {
				// Before version 12 an uncounted nack's delay was dropped.
				delay = it.DelayMs
			}
			next := *m
			if tx.s.history {
				next.setStory(m.story().ended(tx.s.lastNow, m, *handedBackEnding()))
			}
			next.attempts--
			tx.s.unlease(q, m, &next, delay, tx.touched)
			continue
		}
		q.nackedTotal++
		if it.DeadLetter {
			reason := "nack"
			if it.Reason != "" {
				reason = "nack: " + it.Reason
			}
			tx.s.deadLetter(q, m, reason, nackEnding(it), tx.touched)
			continue
		}
		delay := it.DelayMs
		if delay == 0 {
			// A nack's own delay overrides the policy; an uncounted or
			// dead-letter nack never reaches here.
			delay = retry
		}
		tx.s.returnLeased(q, m, delay, nackEnding(it), tx.touched)
	}
	return res
}

func (tx *Tx) Extend(c *fsmv1.Extend) *ExtendResult {
	refs := c.GetRefs()
	res := &ExtendResult{Items: make([]error, len(refs)), Deadlines: make([]int64, len(refs))}
	if c.GetExtendByMs() < 0 || c.GetExtendByMs() > MaxDurationMs {
		return &ExtendResult{Done: Done{Err: fmt.Errorf("%w: extend_by_ms out of range", ErrInvalid)}}
	}
	for i, r := range refs {
		q, m, err := tx.lookupLease(r)
		if err != nil {
			res.Items[i] = err
			continue
		}
		by := c.ExtendByMs
		if by == 0 {
			by = q.cfg.VisibilityTimeoutMs
		}
		next := *m
		next.setLease(m.leaseToken(), m.consumerID(), tx.s.lastNow+by)
		if tx.s.history {
			next.setStory(m.story().extended(tx.s.lastNow, &next))
		}
		tx.s.put(q, m, &next)
		res.Deadlines[i] = next.deadlineMs() + tx.s.leader.offset(tx.s.lastNow)
		tx.touched.add(q.name)
	}
	return res
}

func (tx *Tx) ReleaseConsumer(c *fsmv1.ReleaseConsumer) *CountResult {
	set := tx.s.consumers[c.GetConsumerId()]
	refs := make([]queueMsg, 0, len(set))
	for r := range set {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b queueMsg) int {
		if a.queue != b.queue {
			if a.queue < b.queue {
				return -1
			}
			return 1
		}
		return cmpUint64(a.id, b.id)
	})
	for _, r := range refs {
		q := tx.s.queues[r.queue]
		tx.s.returnLeased(q, q.get(r.id), 0, releasedEnding(), tx.touched)
	}
	return &CountResult{Count: int64(len(refs))}
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Redrive moves dead-lettered messages of a queue back to it. From log
// version RedriveVersion it takes filters, message ids, dry_run (count
// only; the key is not recorded) and a rate, which starts a job instead
// (redrive.go).
func (tx *Tx) Redrive(c *fsmv1.Redrive) *CountResult {
	q := tx.s.queues[c.GetQueue()]
	if q == nil {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetQueue())}}
	}
	if c.GetLimit() < 0 {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: limit is negative", ErrInvalid)}}
	}
	v14 := tx.version >= RedriveVersion
	if v14 {
		if err := validateRedrive(c); err != nil {
			return &CountResult{Done: Done{Err: err}}
		}
	}
	if tx.version >= RedriveCancelVersion && c.GetCancelJob() != 0 {
		// Keyed like any redrive: a retried cancel answers as the first.
		return tx.idempotentErr(q, recentRedrive, c.GetIdempotencyKey(), func() (int64, error) {
			i := slices.IndexFunc(q.redrives, func(j *redriveJob) bool { return j.id == c.GetCancelJob() })
			if i < 0 {
				return 0, fmt.Errorf("%w: no redrive job %016x of %s in progress", ErrMessageNotFound, c.GetCancelJob(), q.name)
			}
			moved := q.redrives[i].moved
			tx.s.endJob(q, i)
			tx.touched.add(q.name)
			return moved, nil
		})
	}
	dlq := tx.s.queues[q.cfg.DeadLetterQueue]
	if q.isDLQ || dlq == nil {
		return &CountResult{}
	}
	f := dlqFilter{anyKey: true}
	var ids []uint64
	if v14 {
		f, ids = tx.redriveFilter(c), sortedIDs(c.GetMessageIds())
		if ids == nil && len(c.GetMessageIds()) > 0 {
			ids = []uint64{}
		}
	}
	collect := func() []*message {
		var moving []*message
		tx.s.redriveable(q, dlq, &f, ids, func(m *message) bool {
			moving = append(moving, m)
			return c.Limit == 0 || int64(len(moving)) < c.Limit
		})
		return moving
	}
	if v14 && c.GetDryRun() {
		tx.settleDue(q) // counted where the sweep would have put them
		return &CountResult{Count: int64(len(collect()))}
	}
	if v14 && c.GetRateMilli() > 0 && c.GetIdempotencyKey() != "" {
		for _, j := range q.redrives {
			if j.key == c.GetIdempotencyKey() {
				if e, ok := q.recall(recentEntry{kind: recentRedrive, key: j.key}, tx.s.lastNow); ok {
					return &CountResult{Count: e.count, Job: j.id}
				}
			}
		}
	}
	res := tx.idempotentErr(q, recentRedrive, c.GetIdempotencyKey(), func() (int64, error) {
		tx.settleDue(q) // its messages whose TTL passed are in the DLQ first
		if v14 && c.GetRateMilli() > 0 {
			return tx.startJob(q, dlq, c, f, ids)
		}
		moving := collect()
		for _, m := range moving {
			tx.redriveOne(q, dlq, m)
		}
		if len(moving) > 0 {
			tx.touched.add(q.name)
			tx.touched.add(dlq.name)
		}
		return int64(len(moving)), nil
	})
	if res.Err == nil && v14 && c.GetRateMilli() > 0 {
		if n := len(q.redrives); n > 0 && q.redrives[n-1].id == tx.index {
			res.Job = tx.index
		}
	}
	return res
}

// checkEmpty is DeleteQueue's if_empty condition: no message in the queue
// (ready, delayed or leased) and none of its messages in its dead-letter
// queue, which a delete would drop or orphan.
func (q *queue) checkEmpty() error {
	if n := int64(q.msgs.Len()); n > 0 || q.deadLettered > 0 {
		return fmt.Errorf("%w: queue %s holds %d messages (%d ready, %d delayed, %d in flight) and %d dead-lettered; purge or redrive them first, or delete without if_empty",
			ErrNotEmpty, q.name, n, q.ready, q.delayed, q.inFlight, q.deadLettered)
	}
	return nil
}

// settleDue does the due work of q that the bounded sweep left for later
// (sweep.go), from log version 13; before it nothing is ever left.
func (tx *Tx) settleDue(q *queue) {
	if tx.version >= SweepBudgetVersion {
		tx.s.settleDue(q, tx.touched)
	}
}
