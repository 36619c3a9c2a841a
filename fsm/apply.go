package fsm

import (
	"fmt"
	"slices"

	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/proto"
)

// applyCommand applies one decoded entry by the rules of its log version
// (e.version): a command or rule introduced in version N is recognised
// only in entries of version >= N, exactly as older builds saw them.
func (f *FSM) applyCommand(e entry, cmd *fsmv1.Command) Result {
	index, touched := e.index, e.touched
	if cmd.NowMs > f.lastNow {
		f.lastNow = cmd.NowMs
	}
	f.advance(touched)
	switch op := cmd.Op.(type) {
	case *fsmv1.Command_CreateQueue:
		return f.createQueue(op.CreateQueue, touched)
	case *fsmv1.Command_UpdateQueue:
		return f.updateQueue(op.UpdateQueue, touched)
	case *fsmv1.Command_DeleteQueue:
		return f.deleteQueue(op.DeleteQueue, touched)
	case *fsmv1.Command_PurgeQueue:
		return f.purgeQueue(op.PurgeQueue, touched)
	case *fsmv1.Command_Enqueue:
		return f.enqueue(index, op.Enqueue, touched)
	case *fsmv1.Command_LeaseGrant:
		return f.grant(index, op.LeaseGrant, touched)
	case *fsmv1.Command_LeaseRollback:
		return f.forRefs(op.LeaseRollback.GetRefs(), touched, f.rollbackOne)
	case *fsmv1.Command_Ack:
		return f.forRefs(op.Ack.GetRefs(), touched, f.ackOne)
	case *fsmv1.Command_Nack:
		return f.nack(op.Nack, touched)
	case *fsmv1.Command_Extend:
		return f.extend(op.Extend, touched)
	case *fsmv1.Command_LeaseExpire:
		return f.forRefs(op.LeaseExpire.GetRefs(), touched, f.expireOne)
	case *fsmv1.Command_ReleaseConsumer:
		return f.releaseConsumer(op.ReleaseConsumer, touched)
	case *fsmv1.Command_Redrive:
		return f.redrive(op.Redrive, touched)
	case *fsmv1.Command_Tick:
		return &Done{}
	case *fsmv1.Command_Checkpoint:
		f.checkpoint(index)
		return &CheckpointResult{Index: index}
	case *fsmv1.Command_SetClusterVersion:
		if e.version < 2 {
			// Version 1 has no such command: a version-1 build read it
			// as an empty command, and so must this one.
			return failed(fmt.Errorf("%w: empty or unknown command", ErrInvalid))
		}
		return f.setClusterVersion(e, op.SetClusterVersion)
	default:
		return failed(fmt.Errorf("%w: empty or unknown command", ErrInvalid))
	}
}

// setClusterVersion raises the cluster version. It never lowers it (a
// late or repeated proposal changes nothing) and never raises it past the
// entry's own version: an entry cannot vouch for rules newer than its own.
func (f *FSM) setClusterVersion(e entry, c *fsmv1.SetClusterVersion) *Done {
	v := c.GetVersion()
	switch {
	case v > e.version:
		return failed(fmt.Errorf("%w: cluster version %d proposed in a version-%d entry", ErrInvalid, v, e.version))
	case v <= f.clusterVersion:
		return failed(fmt.Errorf("%w: cluster version is already %d, not raised to %d", ErrInvalid, f.clusterVersion, v))
	}
	f.clusterVersion = v
	return &Done{}
}

// advance applies what the passage of time does: delayed messages become
// ready, TTLs pass (to the DLQ), dedup entries lapse. It runs before every
// command, driven only by the command's time.
func (f *FSM) advance(touched *touchSet) {
	now := f.lastNow
	for {
		r, ok := f.delayed.Min()
		if !ok || r.at > now {
			break
		}
		q := f.queues[r.queue]
		m := q.get(r.id)
		next := *m
		next.state = stateReady
		f.put(q, m, &next)
		touched.add(q.name)
	}
	for {
		r, ok := f.ttl.Min()
		if !ok || r.at > now {
			break
		}
		q := f.queues[r.queue]
		f.deadLetter(q, q.get(r.id), "ttl", touched)
	}
	for {
		r, ok := f.dedupExp.Min()
		if !ok || r.at > now {
			break
		}
		f.dedupExp.DeleteMin()
		if q := f.queues[r.queue]; q != nil {
			// One removal instead of a lookup and a removal; an entry that
			// is not this ref's (never expected) is put back.
			if e, ok := q.dedup.Delete(r.key); ok && e.messageID != r.messageID {
				q.dedup.ReplaceOrInsert(e)
			}
		}
	}
}

// deadLetter moves m out of q into q's DLQ, or, for a queue without one (a
// DLQ itself), back to ready: a message is never silently dropped.
func (f *FSM) deadLetter(q *queue, m *message, reason string, touched *touchSet) {
	touched.add(q.name)
	dlq := f.queues[q.cfg.DeadLetterQueue]
	next := *m
	next.state, next.expiresMs, next.visibleMs = stateReady, 0, 0
	next.leaseToken, next.consumerID, next.deadlineMs = 0, "", 0
	if q.isDLQ || dlq == nil {
		f.put(q, m, &next)
		return
	}
	f.put(q, m, nil)
	next.origin, next.dlReason = q.name, reason
	f.put(dlq, nil, &next)
	touched.add(dlq.name)
}

func (f *FSM) createQueue(c *fsmv1.CreateQueue, touched *touchSet) *QueueResult {
	if err := ValidateQueueName(c.GetName()); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if err := validateConfig(c.GetConfig()); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if _, ok := f.queues[c.Name]; ok {
		return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueExists, c.Name)}}
	}
	raw := c.GetConfig()
	dlqName := raw.GetDeadLetterQueue()
	if dlqName == "" {
		dlqName = c.Name + DLQSuffix
	}
	if dlqName == c.Name {
		return &QueueResult{Done: Done{Err: fmt.Errorf("%w: a queue cannot be its own dead-letter queue", ErrInvalid)}}
	}
	if err := ValidateQueueName(dlqName); err != nil {
		return &QueueResult{Done: Done{Err: fmt.Errorf("dead-letter queue name: %w", err)}}
	}
	dlq := f.queues[dlqName]
	if dlq != nil && !dlq.isDLQ {
		// An existing ordinary queue becomes a shared DLQ only if its own
		// DLQ is empty, so no message would be stranded or dead-lettered twice.
		if own := f.queues[dlq.cfg.DeadLetterQueue]; own != nil && (own.msgs.Len() > 0 || f.servedBy(own.name) > 1 || !own.autoDLQ) {
			return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s is a regular queue whose own dead-letter queue is in use", ErrInvalid, dlqName)}}
		}
	}
	if dlq == nil {
		dlq = newQueue(dlqName)
		dlq.raw = &fsmv1.QueueConfig{}
		dlq.autoDLQ = true
		f.queues[dlqName] = dlq
	}
	f.makeDLQ(dlq)
	q := newQueue(c.Name)
	q.raw = &fsmv1.QueueConfig{}
	if raw != nil {
		q.raw = proto.Clone(raw).(*fsmv1.QueueConfig)
	}
	q.raw.DeadLetterQueue = dlqName
	q.cfg = effectiveConfig(q.raw, dlqName)
	f.queues[c.Name] = q
	touched.add(q.name)
	return &QueueResult{Queue: f.queueInfo(q)}
}

// makeDLQ turns q into a dead-letter queue: it has no DLQ of its own.
func (f *FSM) makeDLQ(q *queue) {
	if q.isDLQ {
		return
	}
	old := q.cfg.GetDeadLetterQueue()
	q.isDLQ = true
	q.raw.DeadLetterQueue = ""
	q.cfg = effectiveConfig(q.raw, "")
	if od := f.queues[old]; od != nil && od.autoDLQ && f.servedBy(old) == 0 && od.msgs.Len() == 0 {
		f.dropQueue(od)
	}
}

// servedBy counts the queues that name dlq as their dead-letter queue.
func (f *FSM) servedBy(dlq string) int {
	n := 0
	for _, q := range f.queues {
		if q.cfg != nil && q.cfg.DeadLetterQueue == dlq {
			n++
		}
	}
	return n
}

func (f *FSM) updateQueue(c *fsmv1.UpdateQueue, touched *touchSet) *QueueResult {
	q := f.queues[c.GetName()]
	if q == nil {
		return &QueueResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetName())}}
	}
	if err := ValidateMask(c.Mask); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	if err := validateConfig(c.GetConfig()); err != nil {
		return &QueueResult{Done: Done{Err: err}}
	}
	raw := mergeConfig(q.raw, c.GetConfig(), c.Mask)
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
	touched.add(q.name)
	return &QueueResult{Queue: f.queueInfo(q)}
}

func (f *FSM) deleteQueue(c *fsmv1.DeleteQueue, touched *touchSet) *Done {
	q := f.queues[c.GetName()]
	if q == nil {
		return failed(fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetName()))
	}
	if q.isDLQ {
		if users := f.servedBy(q.name); users > 0 {
			return failed(fmt.Errorf("%w: %s is the dead-letter queue of %d queue(s); delete those first", ErrInUse, q.name, users))
		}
	}
	f.dropQueue(q)
	touched.add(q.name)
	if dlq := f.queues[q.cfg.DeadLetterQueue]; dlq != nil && !q.isDLQ {
		if dlq.autoDLQ && f.servedBy(dlq.name) == 0 {
			f.dropQueue(dlq)
			touched.add(dlq.name)
		} else {
			// The shared DLQ stays; its messages from the deleted queue
			// can no longer be redriven, so they forget their origin.
			var orphans []*message
			dlq.msgs.Ascend(func(it msgItem) bool {
				if it.m.origin == q.name {
					orphans = append(orphans, it.m)
				}
				return true
			})
			for _, m := range orphans {
				next := *m
				next.origin = ""
				f.put(dlq, m, &next)
			}
		}
	}
	return &Done{}
}

// dropQueue removes q and every message in it, in id order.
func (f *FSM) dropQueue(q *queue) {
	var all []*message
	q.msgs.Ascend(func(it msgItem) bool { all = append(all, it.m); return true })
	for _, m := range all {
		f.put(q, m, nil)
	}
	q.dedup.Ascend(func(e dedupEntry) bool {
		f.dedupExp.Delete(dedupRef{at: e.expiresMs, messageID: e.messageID})
		return true
	})
	delete(f.queues, q.name)
}

func (f *FSM) purgeQueue(c *fsmv1.PurgeQueue, touched *touchSet) *CountResult {
	q := f.queues[c.GetName()]
	if q == nil {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetName())}}
	}
	var victims []*message
	q.msgs.Ascend(func(it msgItem) bool {
		if it.m.state != stateLeased {
			victims = append(victims, it.m)
		}
		return true
	})
	for _, m := range victims {
		f.put(q, m, nil)
	}
	touched.add(q.name)
	return &CountResult{Count: int64(len(victims))}
}

func (f *FSM) enqueue(index uint64, c *fsmv1.Enqueue, touched *touchSet) *EnqueueResult {
	res := &EnqueueResult{Batches: make([]BatchResult, len(c.GetBatches()))}
	pos := uint64(0)
	total := 0
	for _, b := range c.GetBatches() {
		total += len(b.GetMessages())
	}
	if total >= maxMessagesPerEntry {
		return &EnqueueResult{Done: Done{Err: fmt.Errorf("%w: %d messages in one entry, the limit is %d", ErrInvalid, total, maxMessagesPerEntry-1)}}
	}
	now := f.lastNow
	for bi, b := range c.GetBatches() {
		q := f.queues[b.GetQueue()]
		if q == nil {
			res.Batches[bi].Err = fmt.Errorf("%w: %s", ErrQueueNotFound, b.GetQueue())
			pos += uint64(len(b.GetMessages()))
			continue
		}
		if len(b.GetMessages()) == 0 {
			res.Batches[bi].Err = fmt.Errorf("%w: no messages", ErrInvalid)
			continue
		}
		var bad error
		for i, m := range b.Messages {
			if err := ValidateMessage(i, m, q.cfg); err != nil {
				bad = err
				break
			}
		}
		if bad != nil {
			res.Batches[bi].Err = bad
			pos += uint64(len(b.Messages))
			continue
		}
		ids := make([]uint64, len(b.Messages))
		for i, em := range b.Messages {
			id := index<<20 | pos
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
					f.dedupExp.Delete(dedupRef{at: old.expiresMs, messageID: old.messageID})
				}
				f.dedupExp.ReplaceOrInsert(dedupRef{at: exp, messageID: id, queue: q.name, key: key})
			}
			m := &message{
				id:           id,
				payload:      em.Payload,
				headers:      em.Headers,
				priority:     em.Priority,
				fairnessKey:  em.FairnessKey,
				weight:       max(em.Weight, 1),
				throttleKeys: em.ThrottleKeys,
				dedupID:      em.DedupId,
				enqueuedMs:   now,
			}
			ttl := em.TtlMs
			if ttl == 0 {
				ttl = q.cfg.MessageTtlMs
			}
			if ttl > 0 && !q.isDLQ {
				m.expiresMs = now + ttl
			}
			if em.DelayMs > 0 {
				m.state, m.visibleMs = stateDelayed, now+em.DelayMs
			}
			f.put(q, nil, m)
			q.enqueuedTotal++
			ids[i] = id
		}
		res.Batches[bi].IDs = ids
		touched.add(q.name)
	}
	return res
}

func (f *FSM) grant(index uint64, c *fsmv1.LeaseGrant, touched *touchSet) *GrantResult {
	gs := c.GetGrants()
	if len(gs) >= maxMessagesPerEntry {
		return &GrantResult{Done: Done{Err: fmt.Errorf("%w: too many grants", ErrInvalid)}}
	}
	res := &GrantResult{Items: make([]error, len(gs)), Deliveries: make([]*state.Delivery, len(gs))}
	for i, g := range gs {
		q := f.queues[g.GetQueue()]
		if q == nil {
			res.Items[i] = ErrQueueNotFound
			continue
		}
		m := q.get(g.MessageId)
		if m == nil {
			res.Items[i] = ErrMessageNotFound
			continue
		}
		if m.state != stateReady || g.ConsumerId == "" {
			res.Items[i] = ErrStaleLease
			continue
		}
		next := *m
		next.state = stateLeased
		next.leaseToken = index<<20 | uint64(i)
		next.consumerID = g.ConsumerId
		next.deadlineMs = max(g.DeadlineMs, f.lastNow)
		next.attempts++
		f.put(q, m, &next)
		res.Deliveries[i] = q.delivery(&next)
		touched.add(q.name)
	}
	return res
}

// lookupLease finds the message a ref names and checks the token.
func (f *FSM) lookupLease(r *fsmv1.Ref) (*queue, *message, error) {
	q := f.queues[r.GetQueue()]
	if q == nil {
		return nil, nil, ErrQueueNotFound
	}
	m := q.get(r.GetMessageId())
	if m == nil {
		return nil, nil, ErrMessageNotFound
	}
	if m.state != stateLeased || m.leaseToken != r.GetLeaseToken() || r.GetLeaseToken() == 0 {
		return nil, nil, ErrStaleLease
	}
	return q, m, nil
}

func (f *FSM) forRefs(refs []*fsmv1.Ref, touched *touchSet, one func(*queue, *message, *touchSet) error) *ItemsResult {
	res := &ItemsResult{Items: make([]error, len(refs))}
	for i, r := range refs {
		q, m, err := f.lookupLease(r)
		if err == nil {
			err = one(q, m, touched)
		}
		res.Items[i] = err
	}
	return res
}

func (f *FSM) ackOne(q *queue, m *message, touched *touchSet) error {
	f.put(q, m, nil)
	q.ackedTotal++
	touched.add(q.name)
	return nil
}

func (f *FSM) rollbackOne(q *queue, m *message, touched *touchSet) error {
	next := *m
	next.attempts--
	f.unlease(q, m, &next, 0, touched)
	return nil
}

func (f *FSM) expireOne(q *queue, m *message, touched *touchSet) error {
	if m.deadlineMs > f.lastNow {
		return fmt.Errorf("%w: lease has not expired", ErrStaleLease)
	}
	q.expiredTotal++
	f.returnLeased(q, m, 0, touched)
	return nil
}

// returnLeased ends a lease that counted as a delivery (nack, expiry,
// release): past max_deliveries or its TTL the message is dead-lettered.
func (f *FSM) returnLeased(q *queue, m *message, delayMs int64, touched *touchSet) {
	switch {
	case m.expiresMs > 0 && m.expiresMs <= f.lastNow:
		f.deadLetter(q, m, "ttl", touched)
	case !q.isDLQ && m.attempts >= q.cfg.MaxDeliveries:
		f.deadLetter(q, m, "max_deliveries", touched)
	default:
		next := *m
		f.unlease(q, m, &next, delayMs, touched)
	}
}

// unlease stores next (a copy of m) as ready, or delayed for delayMs.
func (f *FSM) unlease(q *queue, m, next *message, delayMs int64, touched *touchSet) {
	next.state = stateReady
	next.leaseToken, next.consumerID, next.deadlineMs = 0, "", 0
	if delayMs > 0 {
		next.state, next.visibleMs = stateDelayed, f.lastNow+delayMs
	}
	f.put(q, m, next)
	touched.add(q.name)
}

func (f *FSM) nack(c *fsmv1.Nack, touched *touchSet) *ItemsResult {
	items := c.GetItems()
	res := &ItemsResult{Items: make([]error, len(items))}
	for i, it := range items {
		if it.GetDelayMs() < 0 || it.GetDelayMs() > MaxDurationMs {
			res.Items[i] = fmt.Errorf("%w: delay_ms out of range", ErrInvalid)
			continue
		}
		q, m, err := f.lookupLease(it.GetRef())
		if err != nil {
			res.Items[i] = err
			continue
		}
		if it.Uncounted && !it.DeadLetter {
			f.rollbackOne(q, m, touched)
			continue
		}
		q.nackedTotal++
		if it.DeadLetter {
			reason := "nack"
			if it.Reason != "" {
				reason = "nack: " + it.Reason
			}
			f.deadLetter(q, m, reason, touched)
			continue
		}
		f.returnLeased(q, m, it.DelayMs, touched)
	}
	return res
}

func (f *FSM) extend(c *fsmv1.Extend, touched *touchSet) *ExtendResult {
	refs := c.GetRefs()
	res := &ExtendResult{Items: make([]error, len(refs)), Deadlines: make([]int64, len(refs))}
	if c.GetExtendByMs() < 0 || c.GetExtendByMs() > MaxDurationMs {
		return &ExtendResult{Done: Done{Err: fmt.Errorf("%w: extend_by_ms out of range", ErrInvalid)}}
	}
	for i, r := range refs {
		q, m, err := f.lookupLease(r)
		if err != nil {
			res.Items[i] = err
			continue
		}
		by := c.ExtendByMs
		if by == 0 {
			by = q.cfg.VisibilityTimeoutMs
		}
		next := *m
		next.deadlineMs = f.lastNow + by
		f.put(q, m, &next)
		res.Deadlines[i] = next.deadlineMs
		touched.add(q.name)
	}
	return res
}

func (f *FSM) releaseConsumer(c *fsmv1.ReleaseConsumer, touched *touchSet) *CountResult {
	set := f.consumers[c.GetConsumerId()]
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
		q := f.queues[r.queue]
		f.returnLeased(q, q.get(r.id), 0, touched)
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

func (f *FSM) redrive(c *fsmv1.Redrive, touched *touchSet) *CountResult {
	q := f.queues[c.GetQueue()]
	if q == nil {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: %s", ErrQueueNotFound, c.GetQueue())}}
	}
	if c.GetLimit() < 0 {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: limit is negative", ErrInvalid)}}
	}
	dlq := f.queues[q.cfg.DeadLetterQueue]
	if q.isDLQ || dlq == nil {
		return &CountResult{}
	}
	var moving []*message
	dlq.msgs.Ascend(func(it msgItem) bool {
		if it.m.origin == q.name && it.m.state != stateLeased {
			moving = append(moving, it.m)
		}
		return c.Limit == 0 || int64(len(moving)) < c.Limit
	})
	for _, m := range moving {
		f.put(dlq, m, nil)
		next := *m
		next.state, next.visibleMs = stateReady, 0
		next.origin, next.dlReason = "", ""
		next.attempts = 0
		f.put(q, nil, &next)
	}
	if len(moving) > 0 {
		touched.add(q.name)
		touched.add(dlq.name)
	}
	return &CountResult{Count: int64(len(moving))}
}
