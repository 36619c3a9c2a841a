package state

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// A DLQ you can work with (log version RedriveVersion, issue 23). Peek and
// Redrive take filters (fairness key, a reason substring, how long ago a
// message was dead-lettered, exact ids); a redrive may be a dry run (a
// count: nothing moves, no idempotency key is recorded) or rate-limited.
// A rate-limited redrive is a job, replicated state in its origin
// queue's record: it counts, when it starts, the messages it will move
// (those dead-lettered no later than its own entry that match), and
// RedriveStep entries the leader proposes move them in id order, each no
// more than the job's rate allows by the state's clock since it started
// (burst + rate·elapsed, burst being one second's worth, at least 1), so
// no leader, old or new, can move them faster. Steps after a failover
// continue from the job's cursor. A job ends when it has moved what it
// counted or walked the whole dead-letter queue (what left it meanwhile,
// purged or acked there, is not moved), and with its queue.
//
// Dead-lettering records when (the state's clock) and in which entry (its
// index) from this version on; older_than_ms counts from that time, and a
// message dead-lettered before the cluster reached the version counts as
// dead-lettered at that instant (Store.deadTimeFromMs), never older.

// RedriveVersion is the log version from which (placeholder: set at
// landing) dead-lettering records its time, Redrive takes filters,
// dry_run, message ids and a rate, and RedriveStep exists.
const RedriveVersion uint32 = 14

// RedriveCancelVersion is the log version from which Redrive.cancel_job
// ends a job; an earlier entry ignores the field (and so would redrive
// everything), so the edge refuses it before the cluster reaches it.
const RedriveCancelVersion uint32 = 16

const (
	// MaxReasonFilterLen bounds reason_contains.
	MaxReasonFilterLen = 256
	// MaxRedriveIDs bounds message_ids in one redrive.
	MaxRedriveIDs = 10_000
	// MaxRedriveJobs bounds the rate-limited redrives of one queue in
	// progress at once.
	MaxRedriveJobs = 16
	// MaxRedriveRateMilli bounds a job's rate: 1,000,000 messages per
	// second, in messages per 1000 s.
	MaxRedriveRateMilli = 1_000_000 * 1000
	// RedriveStepMoves bounds what one job moves in one step entry, and
	// redriveStepScan what it walks looking for them, so a step's time
	// under the write lock is bounded whatever the DLQ holds.
	RedriveStepMoves = 1024
	redriveStepScan  = 4096
	// MaxStepJobs bounds the jobs one RedriveStep names.
	MaxStepJobs = 64
)

// dlqFilter is what a Peek or Redrive asks of a message, beyond coming
// from the queue.
type dlqFilter struct {
	key       string
	anyKey    bool
	reason    string
	cutoff    int64 // dead-lettered at or before this state instant; with hasCutoff
	hasCutoff bool
	upTo      uint64 // dead-lettered in an entry at or before this index; 0 = any
}

// matches reports whether dead-lettered m passes f; fromMs is the time a
// message without a recorded dead-letter time counts as dead-lettered.
func (f *dlqFilter) matches(m *message, fromMs int64) bool {
	if !f.anyKey && m.fairnessKey() != f.key {
		return false
	}
	if f.reason != "" && !strings.Contains(m.dlReason(), f.reason) && !strings.Contains(m.story().lastErr(), f.reason) {
		// last_error exists only in states at cluster version
		// HistoryVersion and later (history.go), which no older build
		// applies: before, the rule matches dead_letter_reason alone, as
		// it did.
		return false
	}
	at, idx := fromMs, uint64(0)
	if d := m.dead(); d != nil && d.atIndex != 0 {
		at, idx = d.atMs, d.atIndex
	}
	if f.hasCutoff && at > f.cutoff {
		return false
	}
	return f.upTo == 0 || idx <= f.upTo
}

// validateRedrive checks a version-14 Redrive's new fields.
func validateRedrive(c *fsmv1.Redrive) error {
	switch {
	case len(c.GetReasonContains()) > MaxReasonFilterLen:
		return fmt.Errorf("%w: reason_contains is %d bytes, at most %d", ErrInvalid, len(c.GetReasonContains()), MaxReasonFilterLen)
	case c.GetOlderThanMs() < 0 || c.GetOlderThanMs() > MaxDurationMs:
		return fmt.Errorf("%w: older_than_ms is %d, it must be in [0, %d]", ErrInvalid, c.GetOlderThanMs(), int64(MaxDurationMs))
	case c.GetRateMilli() < 0 || c.GetRateMilli() > MaxRedriveRateMilli:
		return fmt.Errorf("%w: rate is %d messages per 1000 s, it must be in [0, %d]", ErrInvalid, c.GetRateMilli(), int64(MaxRedriveRateMilli))
	case len(c.GetMessageIds()) > MaxRedriveIDs:
		return fmt.Errorf("%w: %d message_ids, at most %d", ErrInvalid, len(c.GetMessageIds()), MaxRedriveIDs)
	}
	return nil
}

func (tx *Tx) redriveFilter(c *fsmv1.Redrive) dlqFilter {
	f := dlqFilter{key: c.GetFairnessKey(), anyKey: c.GetFairnessKey() == "", reason: c.GetReasonContains(), upTo: tx.index}
	if c.GetOlderThanMs() > 0 {
		f.cutoff, f.hasCutoff = tx.s.lastNow-c.GetOlderThanMs(), true
	}
	return f
}

// redriveable walks dlq's messages from q that f and ids (sorted, unique;
// nil = any) allow and are not leased, in id order, calling fn until it
// returns false.
func (s *Store) redriveable(q, dlq *queue, f *dlqFilter, ids []uint64, fn func(*message) bool) {
	ok := func(m *message) bool {
		return m.origin() == q.name && m.state != stateLeased && f.matches(m, s.deadTimeFromMs)
	}
	if ids != nil {
		for _, id := range ids {
			if m := dlq.get(id); m != nil && ok(m) && !fn(m) {
				return
			}
		}
		return
	}
	dlq.msgs.Ascend(func(it msgItem) bool {
		return !ok(it.m) || fn(it.m)
	})
}

// sortedIDs is ids ascending without repeats (nil for none).
func sortedIDs(ids []uint64) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// redriveOne moves m from dlq back to q, ready, with its attempts reset
// and, from GuardVersion, q's TTL afresh.
func (tx *Tx) redriveOne(q, dlq *queue, m *message) {
	tx.s.put(dlq, m, nil)
	next := *m
	next.state = stateReady
	next.setVisible(0)
	next.setDead(nil)
	next.attempts = 0
	if st := m.story(); st != nil || tx.s.history {
		// Attempts start again; the story stays (from HistoryVersion,
		// with the redrive in it; before, there is none).
		if tx.s.history {
			st = st.withEvent(event{at: tx.s.lastNow, kind: eventRedriven, who: dlq.name, text: q.name})
		}
		next.setStory(st)
	}
	if tx.version >= GuardVersion {
		// Dead-lettering cleared the expiry; before version 12 a
		// redriven message never expired again. It gets its
		// queue's TTL afresh from the redrive (docs/api.md).
		next.expiresMs = 0
		if q.cfg.MessageTtlMs > 0 {
			next.expiresMs = tx.s.lastNow + q.cfg.MessageTtlMs
		}
	}
	tx.s.put(q, nil, &next)
}

// redriveJob is a rate-limited redrive in progress (RedriveVersion).
type redriveJob struct {
	id        uint64 // the index of its entry
	filter    dlqFilter
	olderThan int64
	ids       []uint64 // by ids: the ones still to look at, ascending
	byIDs     bool
	rateMilli int64
	startedMs int64
	lastMs    int64
	total     int64
	moved     int64
	cursor    uint64
	key       string // its idempotency key, so a retry names the same job
}

// burst is what a job may move at once when it starts: one second's
// worth, at least one message.
func (j *redriveJob) burst() int64 { return max(1, j.rateMilli/1000) }

// allowed is how many messages the job may have moved by state instant now.
func (j *redriveJob) allowed(now int64) int64 {
	el := uint64(max(now-j.startedMs, 0)) //nolint:gosec // not negative
	// el·rate can pass 2^63 (a slow job's years at a high rate): 128 bits.
	hi, lo := bits.Mul64(el, uint64(j.rateMilli)) //nolint:gosec // positive
	if hi >= 1_000_000 {
		return j.total // the quotient would not fit: far past the end
	}
	n, _ := bits.Div64(hi, lo, 1_000_000)
	if n >= uint64(j.total) {
		return j.total
	}
	return min(j.total, j.burst()+int64(n)) //nolint:gosec // below total
}

// dueAt is the state instant at which the job may move want more
// messages (now or earlier: already).
func (j *redriveJob) dueAt(want int64) int64 {
	need := j.moved + want - j.burst()
	if need <= 0 {
		return j.startedMs
	}
	// The smallest el with el·rate/1e6 ≥ need (need ≤ total ≤ 2^53-ish
	// in practice; 128 bits all the same).
	hi, lo := bits.Mul64(uint64(need), 1_000_000)     //nolint:gosec // positive
	lo, c := bits.Add64(lo, uint64(j.rateMilli-1), 0) //nolint:gosec // positive
	hi += c
	if hi >= uint64(j.rateMilli) { //nolint:gosec // positive
		return 1<<63 - 1
	}
	el, _ := bits.Div64(hi, lo, uint64(j.rateMilli)) //nolint:gosec // positive
	if el > 1<<62 {
		return 1<<63 - 1
	}
	return j.startedMs + int64(el) //nolint:gosec // bounded above
}

// startJob records a rate-limited redrive of q and answers the count it
// will move (ErrLimit when q has MaxRedriveJobs in progress).
func (tx *Tx) startJob(q, dlq *queue, c *fsmv1.Redrive, f dlqFilter, ids []uint64) (int64, error) {
	if len(q.redrives) >= MaxRedriveJobs {
		return 0, fmt.Errorf("%w: queue %s has %d rate-limited redrives in progress, at most %d", ErrLimit, q.name, len(q.redrives), MaxRedriveJobs)
	}
	j := &redriveJob{id: tx.index, filter: f, olderThan: c.GetOlderThanMs(), ids: ids, byIDs: ids != nil,
		rateMilli: c.GetRateMilli(), startedMs: tx.s.lastNow, key: c.GetIdempotencyKey()}
	tx.s.redriveable(q, dlq, &f, ids, func(*message) bool {
		j.total++
		return c.GetLimit() == 0 || j.total < c.GetLimit()
	})
	if j.total == 0 {
		return 0, nil // nothing to do: no job
	}
	q.redrives = append(q.redrives, j)
	tx.s.redriving[q.name] = struct{}{}
	tx.touched.add(q.name)
	return j.total, nil
}

// RedriveStep moves the next messages of each job it names, as many as
// the job's rate allows by now, at most RedriveStepMoves, walking at most
// redriveStepScan messages. A job named twice, finished or unknown is
// skipped; the count is what moved.
func (tx *Tx) RedriveStep(c *fsmv1.RedriveStep) *CountResult {
	if len(c.GetJobs()) > MaxStepJobs {
		return &CountResult{Done: Done{Err: fmt.Errorf("%w: %d jobs in one step, at most %d", ErrInvalid, len(c.GetJobs()), MaxStepJobs)}}
	}
	var moved int64
	for _, r := range c.GetJobs() {
		q := tx.s.queues[r.GetQueue()]
		if q == nil {
			continue
		}
		i := slices.IndexFunc(q.redrives, func(j *redriveJob) bool { return j.id == r.GetId() })
		if i < 0 {
			continue
		}
		moved += tx.stepJob(q, i)
	}
	return &CountResult{Count: moved}
}

func (tx *Tx) stepJob(q *queue, i int) int64 {
	j := q.redrives[i]
	dlq := tx.s.queues[q.cfg.DeadLetterQueue]
	want := min(j.allowed(tx.s.lastNow)-j.moved, RedriveStepMoves)
	if dlq == nil || want <= 0 {
		return 0
	}
	tx.settleDue(q)
	var moving []*message
	scanned, done := 0, false
	ok := func(m *message) bool {
		return m.origin() == q.name && m.state != stateLeased && j.filter.matches(m, tx.s.deadTimeFromMs)
	}
	if j.byIDs {
		n := 0
		for _, id := range j.ids {
			if int64(len(moving)) >= want || scanned >= redriveStepScan {
				break
			}
			n++
			scanned++
			if m := dlq.get(id); m != nil && ok(m) {
				moving = append(moving, m)
			}
		}
		j.ids = j.ids[n:]
		done = len(j.ids) == 0
	} else {
		done = true
		dlq.msgs.AscendGreaterOrEqual(msgItem{id: j.cursor + 1}, func(it msgItem) bool {
			if int64(len(moving)) >= want || scanned >= redriveStepScan {
				done = false
				return false
			}
			scanned++
			j.cursor = it.id
			if ok(it.m) {
				moving = append(moving, it.m)
			}
			return true
		})
	}
	for _, m := range moving {
		tx.redriveOne(q, dlq, m)
	}
	if len(moving) > 0 {
		j.moved += int64(len(moving))
		j.lastMs = tx.s.lastNow
		tx.touched.add(q.name)
		tx.touched.add(dlq.name)
	}
	if done || j.moved >= j.total {
		tx.s.endJob(q, i)
		tx.touched.add(q.name)
	}
	return int64(len(moving))
}

// endJob drops q's job i.
func (s *Store) endJob(q *queue, i int) {
	q.redrives = slices.Delete(q.redrives, i, i+1)
	if len(q.redrives) == 0 {
		delete(s.redriving, q.name)
	}
}

// RedriveJobInfo describes a job in progress (QueueInfo.Redrives).
type RedriveJobInfo struct {
	ID                       uint64
	Total, Moved             int64
	RateMilli                int64
	StartedMs, LastMovedMs   int64 // on the leader's clock, as every instant a view hands out
	FairnessKey, ReasonMatch string
	OlderThanMs              int64
	MessageIDs               int64
}

func (q *queue) redriveInfo(off int64) []RedriveJobInfo {
	var out []RedriveJobInfo
	for _, j := range q.redrives {
		ji := RedriveJobInfo{ID: j.id, Total: j.total, Moved: j.moved, RateMilli: j.rateMilli,
			StartedMs: j.startedMs + off, FairnessKey: j.filter.key, ReasonMatch: j.filter.reason, OlderThanMs: j.olderThan}
		if j.lastMs != 0 {
			ji.LastMovedMs = j.lastMs + off
		}
		if j.byIDs {
			ji.MessageIDs = int64(len(j.ids))
		}
		out = append(out, ji)
	}
	return out
}

// DueRedrive is a job the leader may step, and when (leader's clock).
type DueRedrive struct {
	Queue string
	ID    uint64
	AtMs  int64
}

// RedriveDue lists every job in progress with the instant (on the clock
// of the leader that proposed the last entry) at which a step would move
// about a tenth of a second's worth (at least one message, at most
// RedriveStepMoves, at most what it has left), queues by name, jobs by
// id: the leader proposes a step then, so a job costs about ten entries
// a second whatever its rate.
func (v View) RedriveDue() []DueRedrive {
	if len(v.s.redriving) == 0 {
		return nil
	}
	names := make([]string, 0, len(v.s.redriving))
	for n := range v.s.redriving {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []DueRedrive
	for _, n := range names {
		for _, j := range v.s.queues[n].redrives {
			want := min(max(1, j.rateMilli/10_000), RedriveStepMoves, j.total-j.moved)
			out = append(out, DueRedrive{Queue: n, ID: j.id, AtMs: j.dueAt(want) + v.offset()})
		}
	}
	return out
}

// record is the job as snapshots carry it.
func (j *redriveJob) record() *fsmv1.RedriveJob {
	return &fsmv1.RedriveJob{Id: j.id, FairnessKey: j.filter.key, ReasonContains: j.filter.reason, OlderThanMs: j.olderThan,
		MessageIds: slices.Clone(j.ids), ByIds: j.byIDs, RateMilli: j.rateMilli, StartedMs: j.startedMs, LastMovedMs: j.lastMs,
		Total: j.total, Moved: j.moved, Cursor: j.cursor, IdempotencyKey: j.key}
}

// loadJob rebuilds a job from its snapshot record.
func loadJob(q *queue, r *fsmv1.RedriveJob) (*redriveJob, error) {
	if r.Id == 0 || r.RateMilli <= 0 || r.RateMilli > MaxRedriveRateMilli || r.Total <= 0 || r.Moved < 0 || r.Moved >= r.Total ||
		len(r.ReasonContains) > MaxReasonFilterLen || r.OlderThanMs < 0 || r.ByIds != (len(r.MessageIds) > 0) || len(r.MessageIds) > MaxRedriveIDs {
		return nil, fmt.Errorf("%w: redrive job %d of %s", ErrInvalid, r.Id, q.name)
	}
	for i := 1; i < len(r.MessageIds); i++ {
		if r.MessageIds[i] <= r.MessageIds[i-1] {
			return nil, fmt.Errorf("%w: redrive job %d of %s: ids out of order", ErrInvalid, r.Id, q.name)
		}
	}
	j := &redriveJob{id: r.Id, filter: dlqFilter{key: r.FairnessKey, anyKey: r.FairnessKey == "", reason: r.ReasonContains, upTo: r.Id},
		olderThan: r.OlderThanMs, ids: r.MessageIds, byIDs: r.ByIds, rateMilli: r.RateMilli, startedMs: r.StartedMs,
		lastMs: r.LastMovedMs, total: r.Total, moved: r.Moved, cursor: r.Cursor, key: r.IdempotencyKey}
	if r.OlderThanMs > 0 {
		j.filter.cutoff, j.filter.hasCutoff = r.StartedMs-r.OlderThanMs, true
	}
	return j, nil
}

// PeekFilter is what a filtered Peek asks (RedriveVersion): with any
// filter or AfterID, messages come in id order.
type PeekFilter struct {
	FairnessKey    string // "" = any
	ReasonContains string
	OlderThanMs    int64 // dead-letter queue only
	AfterID        uint64
}

// PeekFiltered lists up to limit messages matching f in id order: with
// deadLetter the queue's dead-lettered ones (leased ones too, as Peek
// shows them), otherwise its ready ones.
func (v View) PeekFiltered(name string, limit int, deadLetter bool, pf PeekFilter) ([]*Delivery, error) {
	q := v.s.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	f := dlqFilter{key: pf.FairnessKey, anyKey: pf.FairnessKey == "", reason: pf.ReasonContains}
	if pf.OlderThanMs > 0 {
		f.cutoff, f.hasCutoff = v.s.lastNow-pf.OlderThanMs, true
	}
	src, keep := q, func(m *message) bool { return m.state == stateReady && f.matches(m, v.s.deadTimeFromMs) }
	if deadLetter {
		src = v.s.queues[q.cfg.DeadLetterQueue]
		if src == nil || q.isDLQ {
			return nil, nil
		}
		keep = func(m *message) bool { return m.origin() == q.name && f.matches(m, v.s.deadTimeFromMs) }
	}
	var out []*Delivery
	if limit <= 0 {
		return nil, nil
	}
	src.msgs.AscendGreaterOrEqual(msgItem{id: pf.AfterID + 1}, func(it msgItem) bool {
		if pf.AfterID == ^uint64(0) {
			return false
		}
		if keep(it.m) {
			out = append(out, src.delivery(it.m, v.offset()))
		}
		return len(out) < limit
	})
	return out, nil
}
