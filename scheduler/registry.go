package scheduler

import (
	"slices"
	"sync"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// registry is one term's consumers: each queue's consumers in
// registration order, and each consumer's flow counters (grants pending
// to it, deliveries pushed, acks settling). Its mutex guards all of that
// and the consumers' ended state; it is the innermost lock.
type registry struct {
	mu     sync.Mutex
	open   bool
	queues map[string][]*Consumer // by registration sequence
	names  []string               // sorted keys of queues
	// byID holds every consumer whose buffer the sweeper may need to look
	// in: the registered ones and those closing until Close took their
	// buffer.
	byID map[string]*Consumer
	// lapsing are leases whose deliveries were never sent and that are
	// set aside to be rolled back uncounted (queued in a consumer's
	// lapsed, in a rollback in flight, or in Close's): the sweeper does
	// not expire them.
	lapsing map[lapseKey]struct{}
	// full are the consumers with a Limit that were pushed that many
	// deliveries: each ends once it holds none (endSatisfied).
	full map[*Consumer]struct{}
}

// lapseKey names one lease.
type lapseKey struct {
	queue     string
	id, token uint64
}

func keyOf(r *fsmv1.Ref) lapseKey {
	return lapseKey{r.GetQueue(), r.GetMessageId(), r.GetLeaseToken()}
}

func newRegistry() *registry {
	return &registry{open: true, queues: map[string][]*Consumer{}, byID: map[string]*Consumer{}, lapsing: map[lapseKey]struct{}{}, full: map[*Consumer]struct{}{}}
}

// add registers c at the end of its queue's round-robin; it fails with
// ErrNotLeader once the term is over.
func (r *registry) add(c *Consumer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open {
		return ErrNotLeader
	}
	if _, ok := r.queues[c.queue]; !ok {
		i, _ := slices.BinarySearch(r.names, c.queue)
		r.names = slices.Insert(r.names, i, c.queue)
	}
	r.queues[c.queue] = append(r.queues[c.queue], c) // seq grows: stays sorted
	r.byID[c.id] = c
	return nil
}

// removeLocked unregisters c and ends it with err (r.mu held). It reports
// whether c was still live (not ended before).
func (r *registry) removeLocked(c *Consumer, err error) bool {
	if c.ended {
		return false
	}
	cs := r.queues[c.queue]
	if i := slices.Index(cs, c); i >= 0 {
		r.queues[c.queue] = slices.Delete(cs, i, i+1)
	}
	delete(r.full, c)
	c.end(err)
	return true
}

// endSatisfied ends, with ErrLimitReached, every consumer that was pushed
// its Limit of deliveries and no longer holds any of them (the state's
// read lock held): its stream has nothing left to do, and a plain gRPC
// client (grpcurl) sees it end with OK instead of waiting for its own
// deadline. Nothing is left to release.
func (r *registry) endSatisfied(v fsm.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.full {
		if c.pending > 0 || len(c.buf) > 0 || len(c.lapsed) > 0 || c.rolling > 0 || v.LeasesHeld(c.id) > 0 {
			continue
		}
		r.removeLocked(c, ErrLimitReached)
		delete(r.byID, c.id)
	}
}

// lapsedOne undoes the count of a delivery taken out of c's buffer unsent
// (r.mu held): it does not count against c's Limit.
func (r *registry) lapsedOne(c *Consumer) {
	c.delivered--
	if c.delivered < c.limit {
		delete(r.full, c)
	}
}

// closeConsumer unregisters c for Close and ends it with ErrClosed. From
// now on no grant is made to c and the deliveries of its pending grants
// are kept for Close (takeUnsent) instead of being rolled back by the
// pipeline; quiet is closed once no grant to c is pending. live is false
// when c had already ended.
func (r *registry) closeConsumer(c *Consumer) (quiet <-chan struct{}, live bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.removeLocked(c, ErrClosed) {
		return nil, false
	}
	c.closing = true
	q := make(chan struct{})
	c.quiet = q
	c.checkQuiet()
	return q, true
}

// takeUnsent ends Close's hold on c's grants and returns the refs of
// everything granted to c that its stream never took: its buffer, its
// lapsed deliveries and the deliveries of grants handled since it closed.
// Grants handled after this are rolled back by the pipeline as for any
// gone consumer. The refs count as lapsing (the sweeper leaves them to
// Close's rollback) until unlapse.
func (r *registry) takeUnsent(c *Consumer) []*fsmv1.Ref {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.closing = false
	refs := c.drainUnsent(c.unpushed)
	c.unpushed = nil
	delete(r.byID, c.id)
	for _, ref := range refs {
		r.lapsing[keyOf(ref)] = struct{}{}
	}
	return refs
}

// unlapse forgets refs once their rollback has been proposed (applied,
// failed or handed back).
func (r *registry) unlapse(refs []*fsmv1.Ref) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		delete(r.lapsing, keyOf(ref))
	}
}

// lapseLocked sets aside d, just taken out of c's buffer unsent, to be
// rolled back (r.mu held).
func (r *registry) lapseLocked(c *Consumer, d *state.Delivery) {
	ref := &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken}
	c.lapsed = append(c.lapsed, ref)
	r.lapsing[keyOf(ref)] = struct{}{}
}

// lapseBuffered is the sweeper's filter over leases past their deadline
// (the state's read lock held): those whose deliveries still wait in their
// consumer's buffer were never sent, so instead of expiring (which counts
// an attempt) they are taken out of the buffer, so that no stream sends
// them any more, and set aside to be rolled back uncounted. It returns the
// refs left to expire: without those, and without leases already set
// aside.
func (r *registry) lapseBuffered(v fsm.View, refs []*fsmv1.Ref) []*fsmv1.Ref {
	r.mu.Lock()
	defer r.mu.Unlock()
	var inBuf map[*Consumer]map[lapseKey]bool
	kept := refs[:0]
	for _, ref := range refs {
		k := keyOf(ref)
		if _, ok := r.lapsing[k]; ok {
			continue
		}
		kept = append(kept, ref)
		holder, _, _ := v.Lease(ref.GetQueue(), ref.GetMessageId())
		if c := r.byID[holder]; c != nil && len(c.buf) > 0 {
			if inBuf == nil {
				inBuf = map[*Consumer]map[lapseKey]bool{}
			}
			if inBuf[c] == nil {
				inBuf[c] = map[lapseKey]bool{}
			}
			inBuf[c][k] = true
		}
	}
	if inBuf == nil {
		return kept
	}
	moved := false
	for c, keys := range inBuf {
		left := c.buf[:0]
		for _, d := range c.buf {
			if keys[lapseKey{d.Queue, d.ID, d.LeaseToken}] {
				r.lapseLocked(c, d)
				r.lapsedOne(c)
				moved = true
				continue
			}
			left = append(left, d)
		}
		clear(c.buf[len(left):])
		c.buf = left
	}
	if !moved {
		return kept
	}
	out := kept[:0]
	for _, ref := range kept {
		if _, ok := r.lapsing[keyOf(ref)]; !ok {
			out = append(out, ref)
		}
	}
	return out
}

// lapsedPart is how many of a rollback's refs are one consumer's.
type lapsedPart struct {
	c *Consumer
	n int
}

// takeLapsed returns the lapsed deliveries of every registered consumer,
// for one rollback; each consumer counts them as rolling until
// rolledBack (Close waits for that).
func (r *registry) takeLapsed() (refs []*fsmv1.Ref, parts []lapsedPart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range r.names {
		for _, c := range r.queues[name] {
			if len(c.lapsed) == 0 {
				continue
			}
			refs = append(refs, c.lapsed...)
			parts = append(parts, lapsedPart{c, len(c.lapsed)})
			c.rolling += len(c.lapsed)
			c.lapsed = nil
		}
	}
	return refs, parts
}

// rolledBack ends what takeLapsed began, once the rollback was proposed.
func (r *registry) rolledBack(refs []*fsmv1.Ref, parts []lapsedPart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		delete(r.lapsing, keyOf(ref))
	}
	for _, p := range parts {
		p.c.rolling -= p.n
		p.c.checkQuiet()
	}
}

// close ends every consumer with err and refuses new ones; it returns how
// many it ended and the refs of the deliveries their buffers still held
// (never sent: a stream that takes a delivery from the buffer may send it,
// one that did not take it never will).
func (r *registry) close(err error) (n int, unsent []*fsmv1.Ref) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open = false
	for _, name := range r.names {
		for _, c := range r.queues[name] {
			c.end(err)
			unsent = c.drainUnsent(unsent)
			n++
		}
	}
	r.queues, r.names = map[string][]*Consumer{}, nil
	clear(r.byID)
	clear(r.full)
	return n, unsent
}

// drop forgets a queue and ends its consumers with err.
func (r *registry) drop(queue string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.queues[queue] {
		c.end(err)
		delete(r.byID, c.id)
		delete(r.full, c)
	}
	delete(r.queues, queue)
	if i, ok := slices.BinarySearch(r.names, queue); ok {
		r.names = slices.Delete(r.names, i, i+1)
	}
}

// count is the number of consumers registered on queue.
func (r *registry) count(queue string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queues[queue])
}

// queueNames appends, sorted, the queues that have or had consumers this
// term (a queue stays until it is deleted, so its cursors survive churn).
func (r *registry) queueNames(dst []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(dst, r.names...)
}

// creditScratch is one queue's consumers as a pass sees them: parallel
// slices, reused between passes.
type creditScratch struct {
	cons   []*Consumer
	seqs   []uint64
	credit []int
}

// credit fills cs with queue's consumers and what each may still be
// granted, and returns the total (the state's read lock held).
//
// Credit is the consumer's limit less the leases it holds (per the state:
// acks, nacks, expiries and releases show up here) less grants not yet
// handled. A buffered delivery whose lease ended before the stream took it
// still takes buffer space until Take drops it (one that lapsed is taken
// out by the sweeper, lapseBuffered), so the buffer caps credit too;
// nothing signals when the stream takes it, hence the recheck.
func (r *registry) credit(v fsm.View, queue string, ps *passState, cs *creditScratch) (total int) {
	cs.cons, cs.seqs, cs.credit = cs.cons[:0], cs.seqs[:0], cs.credit[:0]
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.queues[queue] {
		used := c.used(v, ps.settlingFree)
		if len(c.buf) > used {
			ps.wakeAt(ps.now.Add(bufferRecheck))
		}
		cr := c.creditLeft(used)
		cs.cons = append(cs.cons, c)
		cs.seqs = append(cs.seqs, c.seq)
		cs.credit = append(cs.credit, cr)
		total += cr
	}
	return total
}

// used is what counts against c's credit (r.mu and the state's read lock
// held): the leases it holds less, if settlingFree, those whose acks are
// settling.
func (c *Consumer) used(v fsm.View, settlingFree bool) int {
	used := v.LeasesHeld(c.id)
	if !settlingFree {
		return used
	}
	for id := range c.settling {
		// Acked by the consumer, the ack not yet applied: the consumer is
		// done with it, so it frees credit now. Once the ack applies the
		// lease is gone from the view and from this count at the same
		// time.
		if v.HoldsLease(c.id, c.queue, id) {
			used--
		}
	}
	return used
}

// creditLeft is what c may still be granted given used (r.mu held): its
// limit less used (or its buffered deliveries, if more) less grants
// pending, and no more than its Limit leaves; nothing once Stop was called
// or its stream is gone.
func (c *Consumer) creditLeft(used int) int {
	if c.stopped {
		return 0
	}
	select {
	case <-c.gone:
		return 0
	default:
	}
	used = max(used, len(c.buf))
	cr := max(c.max-used-c.pending, 0)
	if c.limit > 0 {
		cr = min(cr, max(c.limit-c.delivered-c.pending, 0))
	}
	return cr
}

// assign counts picked grants as pending to their consumers and returns
// the picks that stand, in order: a pick for a consumer that ended since
// its credit was read is dropped (its message stays ready), so nothing is
// granted to a consumer after Close unregistered it.
func (r *registry) assign(cons []*Consumer, picks []pick) []pick {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := picks[:0]
	for _, pk := range picks {
		c := cons[pk.Consumer]
		if c.ended {
			continue
		}
		c.pending++
		kept = append(kept, pk)
	}
	return kept
}

// settled hands a grant batch's outcome to its consumers: every grant
// stops being pending, and each delivery is pushed to its consumer's
// buffer. It returns the deliveries that could not be pushed (the
// consumer ended), by index, for the pipeline to roll back; those of a
// consumer that Close is waiting on are kept for Close instead.
func (r *registry) settled(to []*Consumer, ds []*state.Delivery, unpushed []int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range to {
		c.pending--
		if i < len(ds) && ds[i] != nil {
			switch {
			case c.push(ds[i]):
				c.delivered++
				if c.limit > 0 && c.delivered >= c.limit {
					r.full[c] = struct{}{}
				}
			case c.closing:
				d := ds[i]
				c.unpushed = append(c.unpushed, &fsmv1.Ref{Queue: d.Queue, MessageId: d.ID, LeaseToken: d.LeaseToken})
			default:
				unpushed = append(unpushed, i)
			}
		}
		c.checkQuiet()
	}
	return unpushed
}

// settleMark is one lease marked settling on one consumer.
type settleMark struct {
	c  *Consumer
	id uint64
}

// settle marks the leases named by refs that the view shows held under
// the ref's token by a registered consumer (the state's read lock held).
func (r *registry) settle(v fsm.View, refs []*fsmv1.Ref) []settleMark {
	var marks []settleMark
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		holder, token, ok := v.Lease(ref.GetQueue(), ref.GetMessageId())
		if !ok || token != ref.GetLeaseToken() {
			continue
		}
		for _, c := range r.queues[ref.GetQueue()] {
			if c.id != holder {
				continue
			}
			if c.settling == nil {
				c.settling = map[uint64]struct{}{}
			}
			c.settling[ref.GetMessageId()] = struct{}{}
			c.acked++
			marks = append(marks, settleMark{c, ref.GetMessageId()})
			break
		}
	}
	return marks
}

// unsettle removes marks made by settle.
func (r *registry) unsettle(marks []settleMark) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range marks {
		delete(m.c.settling, m.id)
	}
}
