package state

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// A message's story (log version HistoryVersion): why it failed and what
// happened to it. Each message records its last MaxHistoryAttempts ended
// attempts (who held it, from when to when, how it ended and why), its
// latest failure (last_error) and its last MaxMessageEvents-1 life events
// (leased, extended, nacked, expired, released, dead-lettered, redriven,
// acked; the first event, enqueued, is derived from the message itself).
// The record is replicated state: every instant in it is the state's clock
// (clock.go), it travels in snapshots (MessageRecord.story) and so in the
// digest, and it counts in the message's cost (size), so stats.bytes and
// max_queued_bytes see it. It is bounded: a kept reason is cut to
// MaxAttemptReasonBytes, a consumer to maxConsumerBytes, and a message's
// story costs at most MaxStoryBytes. Consecutive extensions of one lease
// are one event (with their count), so a long lease kept alive does not
// push the rest of the story out.
//
// An entry of an older version records nothing, as older builds did: a
// message nothing has happened to under this version has no story (and no
// cost for one), and a rolled-back grant (never delivered) leaves none.

// HistoryVersion is the log version from which messages record their
// story, acks keep the acked message among the recent outcomes, grants
// carry the consumer's name and a nack's reason is bounded by
// MaxNackReasonBytes.
const HistoryVersion uint32 = 18

const (
	// MaxNackReasonBytes bounds NackItem.reason (from HistoryVersion: a
	// longer one is refused).
	MaxNackReasonBytes = 1024
	// MaxAttemptReasonBytes bounds a reason kept in an attempt or event;
	// longer ones are cut at a UTF-8 boundary.
	MaxAttemptReasonBytes = 256
	// MaxHistoryAttempts ended attempts are kept, the oldest dropped first.
	MaxHistoryAttempts = 16
	// MaxMessageEvents bounds the events GetMessage lists, the derived
	// enqueued event included: MaxMessageEvents-1 are stored.
	MaxMessageEvents = 64
	maxConsumerBytes = 255

	// What a story costs, in bytes (size): a fixed part, and per attempt
	// and per event a fixed part plus its strings.
	storyOverheadBytes   = 128
	attemptOverheadBytes = 64
	eventOverheadBytes   = 64
	// MaxStoryBytes is the most one message's story can cost: its fixed
	// part, last_error and the current consumer, and every attempt and
	// event at the largest strings they can hold (an event's who is a
	// consumer or a queue name, its text a cut reason).
	MaxStoryBytes = storyOverheadBytes + MaxNackReasonBytes + maxConsumerBytes +
		MaxHistoryAttempts*(attemptOverheadBytes+maxConsumerBytes+MaxAttemptReasonBytes) +
		(MaxMessageEvents-1)*(eventOverheadBytes+maxConsumerBytes+MaxAttemptReasonBytes)
)

// outcome is how an attempt ended.
type outcome uint8

const (
	outcomeNone outcome = iota
	outcomeAcked
	outcomeNacked
	outcomeExpired
	outcomeReleased
	outcomeDeadLettered
	outcomeLimit // not an outcome: the bound for loading
)

func (o outcome) String() string {
	switch o {
	case outcomeAcked:
		return "acked"
	case outcomeNacked:
		return "nacked"
	case outcomeExpired:
		return "expired"
	case outcomeReleased:
		return "released"
	case outcomeDeadLettered:
		return "dead_lettered"
	}
	return ""
}

// eventKind is what a life event was.
type eventKind uint8

const (
	eventEnqueued eventKind = iota + 1 // derived, never stored
	eventLeased
	eventExtended
	eventNacked
	eventExpired
	eventReleased
	eventDeadLettered
	eventRedriven
	eventAcked
	eventLimit // not a kind: the bound for loading
)

func (k eventKind) String() string {
	switch k {
	case eventEnqueued:
		return "enqueued"
	case eventLeased:
		return "leased"
	case eventExtended:
		return "extended"
	case eventNacked:
		return "nacked"
	case eventExpired:
		return "expired"
	case eventReleased:
		return "released"
	case eventDeadLettered:
		return "dead_lettered"
	case eventRedriven:
		return "redriven"
	case eventAcked:
		return "acked"
	}
	return ""
}

// attempt is one ended delivery.
type attempt struct {
	n                 int32
	consumer          string
	leasedAt, endedAt int64
	outcome           outcome
	reason            string
}

// event is one life event. Its detail is formatted when read (detail)
// from who (a consumer or a queue), text (a reason), ms (an instant or a
// duration) and n (an attempt or a count), which costs less than a string
// per event.
type event struct {
	at, ms    int64
	kind      eventKind
	n         int32
	who, text string
}

// story is immutable once stored, like the message: every change makes a
// new one (with), and copies of a message share it.
type story struct {
	lastError string
	// While leased: who holds it and since when (the attempt that ends
	// with the lease).
	consumer string
	leasedAt int64
	attempts []attempt
	events   []event
}

// with is a copy of st (nil: an empty story) changed by f.
func (st *story) with(f func(*story)) *story {
	next := &story{}
	if st != nil {
		*next = *st
		next.attempts = slices.Clone(st.attempts)
		next.events = slices.Clone(st.events)
	}
	f(next)
	if next.lastError == "" && next.consumer == "" && next.leasedAt == 0 && len(next.attempts) == 0 && len(next.events) == 0 {
		return nil
	}
	return next
}

// add appends e, dropping the oldest past the bound. An extension right
// after an extension (necessarily of the same lease: every end of a lease
// is an event) replaces it, counting both.
func (st *story) add(e event) {
	if n := len(st.events); e.kind == eventExtended && n > 0 && st.events[n-1].kind == eventExtended {
		e.n += st.events[n-1].n
		st.events[n-1] = e
		return
	}
	st.events = append(st.events, e)
	if over := len(st.events) - (MaxMessageEvents - 1); over > 0 {
		st.events = slices.Delete(st.events, 0, over)
	}
}

// cost is what the story counts in its message's cost (size).
func (st *story) cost() int64 {
	if st == nil {
		return 0
	}
	n := int64(storyOverheadBytes + len(st.lastError) + len(st.consumer))
	for _, a := range st.attempts {
		n += int64(attemptOverheadBytes + len(a.consumer) + len(a.reason))
	}
	for _, e := range st.events {
		n += int64(eventOverheadBytes + len(e.who) + len(e.text))
	}
	return n
}

// cutUTF8 cuts s to at most n bytes, at a UTF-8 boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n])
}

// ending is how a lease ends: the attempt's outcome (dead_lettered
// replaces it when the end sends the message to its DLQ), the event that
// says so, why, and the failure it records as last_error ("" keeps it).
type ending struct {
	outcome   outcome
	kind      eventKind
	reason    string
	lastError string
	delayMs   int64 // a nack's: when it comes back
}

// leased is st once m (the message as granted) is leased to consumer.
func (st *story) leased(now int64, m *message, consumer string) *story {
	return st.with(func(n *story) {
		n.consumer, n.leasedAt = consumer, now
		n.add(event{at: now, kind: eventLeased, who: consumer, n: m.attempts, ms: m.deadlineMs()})
	})
}

// rolledBack is st without the grant a LeaseRollback undoes: the
// delivery never happened, so neither did its event.
func (st *story) rolledBack() *story {
	if st == nil {
		return nil
	}
	return st.with(func(n *story) {
		if k := len(n.events); k > 0 && n.events[k-1].kind == eventLeased {
			n.events = n.events[:k-1]
		}
		n.consumer, n.leasedAt = "", 0
	})
}

// extended is st once the lease of m is extended to its new deadline.
func (st *story) extended(now int64, m *message) *story {
	return st.with(func(n *story) {
		n.add(event{at: now, kind: eventExtended, who: n.leaseHolder(m), n: 1, ms: m.deadlineMs()})
	})
}

// leaseHolder is who holds m's lease as the story knows it: the name the
// grant gave, or the consumer id of a lease granted before the story began.
func (st *story) leaseHolder(m *message) string {
	if st != nil && st.consumer != "" {
		return st.consumer
	}
	return cutUTF8(m.consumerID(), maxConsumerBytes)
}

// ended is st once m's lease ends as e says, at now.
func (st *story) ended(now int64, m *message, e ending) *story {
	return st.with(func(n *story) {
		who := n.leaseHolder(m)
		reason := cutUTF8(e.reason, MaxAttemptReasonBytes)
		n.attempts = append(n.attempts, attempt{n: m.attempts, consumer: who, leasedAt: n.leasedAt, endedAt: now, outcome: e.outcome, reason: reason})
		if over := len(n.attempts) - MaxHistoryAttempts; over > 0 {
			n.attempts = slices.Delete(n.attempts, 0, over)
		}
		n.consumer, n.leasedAt = "", 0
		if e.lastError != "" {
			n.lastError = e.lastError
		}
		n.add(event{at: now, kind: e.kind, who: who, text: reason, ms: e.delayMs})
	})
}

// withEvent is st with one more event.
func (st *story) withEvent(e event) *story { return st.with(func(n *story) { n.add(e) }) }

// grantConsumer is who a grant names in the story: the stream's name, or
// its consumer id when it had none (bounded either way: the entry is not
// trusted).
func grantConsumer(g *fsmv1.Grant) string {
	if g.GetConsumerName() != "" {
		return cutUTF8(g.GetConsumerName(), maxConsumerBytes)
	}
	return cutUTF8(g.GetConsumerId(), maxConsumerBytes)
}

// nackEnding is how a counted nack ends its lease.
func nackEnding(it *fsmv1.NackOne) *ending {
	e := &ending{outcome: outcomeNacked, kind: eventNacked, reason: it.GetReason(), lastError: it.GetReason(), delayMs: it.GetDelayMs()}
	if e.lastError == "" {
		e.lastError = "nacked"
	}
	return e
}

// expiredEnding, releasedEnding and handedBackEnding are the other ends
// of a lease: its deadline passed, its consumer went away, its consumer
// handed it back unprocessed (which records no failure).
func expiredEnding() *ending {
	return &ending{outcome: outcomeExpired, kind: eventExpired, reason: "lease expired", lastError: "lease expired"}
}

func releasedEnding() *ending {
	return &ending{outcome: outcomeReleased, kind: eventReleased, reason: "consumer disconnected", lastError: "consumer disconnected"}
}

func handedBackEnding() *ending {
	return &ending{outcome: outcomeReleased, kind: eventReleased, reason: "handed back unprocessed"}
}

// Attempt is one ended delivery as reads show it (instants on the clock
// of the leader that proposed the last applied entry, like every instant
// a view hands out).
type Attempt struct {
	Attempt               int32
	Consumer              string
	LeasedAtMs, EndedAtMs int64
	Outcome, Reason       string
}

// Event is one life event as GetMessage shows it.
type Event struct {
	AtMs         int64
	Kind, Detail string
}

// MessageInfo is one message's whole story (View.Message).
type MessageInfo struct {
	Delivery *Delivery // without its payload when State is "acked"
	State    string    // ready, delayed, in_flight, dead_lettered or acked
	Events   []Event
}

// history projects the story's attempts, off as in delivery.
func (st *story) history(off int64) []Attempt {
	if st == nil || len(st.attempts) == 0 {
		return nil
	}
	out := make([]Attempt, len(st.attempts))
	for i, a := range st.attempts {
		leased := a.leasedAt
		if leased != 0 {
			leased += off
		}
		out[i] = Attempt{Attempt: a.n, Consumer: a.consumer, LeasedAtMs: leased, EndedAtMs: a.endedAt + off, Outcome: a.outcome.String(), Reason: a.reason}
	}
	return out
}

func (st *story) lastErr() string {
	if st == nil {
		return ""
	}
	return st.lastError
}

// detail says what an event was about, in words.
func (e event) detail(off int64) string {
	at := func(ms int64) string { return time.UnixMilli(ms + off).UTC().Format("2006-01-02T15:04:05.000Z") }
	switch e.kind {
	case eventLeased:
		return fmt.Sprintf("consumer %s, attempt %d, deadline %s (in %s)", e.who, e.n, at(e.ms), HumanMs(e.ms-e.at))
	case eventExtended:
		if e.n > 1 {
			return fmt.Sprintf("consumer %s, deadline %s (extended %d times)", e.who, at(e.ms), e.n)
		}
		return fmt.Sprintf("consumer %s, deadline %s", e.who, at(e.ms))
	case eventNacked:
		d := "by " + e.who
		if e.ms > 0 {
			d += ", again in " + HumanMs(e.ms)
		}
		if e.text != "" {
			d += ": " + e.text
		}
		return d
	case eventExpired:
		return fmt.Sprintf("the lease of consumer %s lapsed", e.who)
	case eventReleased:
		return fmt.Sprintf("consumer %s: %s", e.who, e.text)
	case eventDeadLettered:
		return fmt.Sprintf("to %s: %s", e.who, e.text)
	case eventRedriven:
		return fmt.Sprintf("from %s to %s", e.who, e.text)
	case eventAcked:
		return "by " + e.who
	}
	return ""
}

// messageState names where a stored message is.
func messageState(q *queue, m *message) string {
	switch {
	case m.state == stateLeased:
		return "in_flight"
	case q.isDLQ || m.origin() != "":
		return "dead_lettered"
	case m.state == stateDelayed:
		return "delayed"
	}
	return "ready"
}

// info is the whole story of m in q as a read shows it.
func (q *queue) messageInfo(m *message, state string, off int64) *MessageInfo {
	d := q.delivery(m, off)
	into := m.origin()
	if into == "" {
		into = q.name
	}
	enq := fmt.Sprintf("into %s", into)
	if k := m.fairnessKey(); k != "" {
		enq += ", fairness key " + k
	}
	if m.priority != 0 {
		enq += fmt.Sprintf(", priority %d", m.priority)
	}
	info := &MessageInfo{Delivery: d, State: state, Events: []Event{{AtMs: m.enqueuedMs + off, Kind: eventEnqueued.String(), Detail: enq}}}
	if st := m.story(); st != nil {
		for _, e := range st.events {
			info.Events = append(info.Events, Event{AtMs: e.at + off, Kind: e.kind.String(), Detail: e.detail(off)})
		}
	}
	return info
}

// Message tells the story of message id as queue sees it: in the queue,
// in its dead-letter queue (having come from it), or acked while the ack
// is among the queue's recent outcomes (recent.go), without its payload.
// Anything else is ErrMessageNotFound.
func (v View) Message(queue string, id uint64) (*MessageInfo, error) {
	q := v.s.queues[queue]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	off := v.offset()
	if m := q.get(id); m != nil {
		return q.messageInfo(m, messageState(q, m), off), nil
	}
	if dlq := v.s.queues[q.cfg.DeadLetterQueue]; dlq != nil && !q.isDLQ {
		if m := dlq.get(id); m != nil && m.origin() == q.name {
			return dlq.messageInfo(m, messageState(dlq, m), off), nil
		}
	}
	var acked *message
	q.recent.AscendGreaterOrEqual(recentEntry{kind: recentAck, messageID: id}, func(e recentEntry) bool {
		if e.kind != recentAck || e.messageID != id {
			return false
		}
		if e.acked != nil && within(e.atMs, v.s.lastNow) {
			acked = e.acked
		}
		return acked == nil
	})
	if acked != nil {
		return q.messageInfo(acked, "acked", off), nil
	}
	return nil, fmt.Errorf("%w: message %016x in %s", ErrMessageNotFound, id, queue)
}

// storyRecord is st as snapshots carry it (nil for none).
func (st *story) record() *fsmv1.MessageStory {
	if st == nil {
		return nil
	}
	r := &fsmv1.MessageStory{LastError: st.lastError, LeaseConsumer: st.consumer, LeasedAtMs: st.leasedAt}
	if len(st.attempts) > 0 {
		r.Attempts = make([]*fsmv1.AttemptRecord, len(st.attempts))
		for i, a := range st.attempts {
			r.Attempts[i] = &fsmv1.AttemptRecord{Attempt: a.n, Consumer: a.consumer, LeasedAtMs: a.leasedAt, EndedAtMs: a.endedAt, Outcome: uint32(a.outcome), Reason: a.reason}
		}
	}
	if len(st.events) > 0 {
		r.Events = make([]*fsmv1.EventRecord, len(st.events))
		for i, e := range st.events {
			r.Events[i] = &fsmv1.EventRecord{AtMs: e.at, Kind: uint32(e.kind), Who: e.who, Text: e.text, Ms: e.ms, N: e.n}
		}
	}
	return r
}

// loadStory is a snapshot's story, checked against the bounds a live one
// keeps (a snapshot is not trusted).
func loadStory(r *fsmv1.MessageStory, id uint64) (*story, error) {
	if r == nil {
		return nil, nil
	}
	bad := func(what string) error { return fmt.Errorf("%w: message %d: story %s", ErrInvalid, id, what) }
	switch {
	case len(r.Attempts) > MaxHistoryAttempts:
		return nil, bad("has too many attempts")
	case len(r.Events) > MaxMessageEvents-1:
		return nil, bad("has too many events")
	case len(r.LastError) > MaxNackReasonBytes || len(r.LeaseConsumer) > maxConsumerBytes:
		return nil, bad("has an oversized field")
	}
	st := &story{lastError: r.LastError, consumer: r.LeaseConsumer, leasedAt: r.LeasedAtMs}
	for _, a := range r.Attempts {
		if a.Outcome == 0 || a.Outcome >= uint32(outcomeLimit) || len(a.Consumer) > maxConsumerBytes || len(a.Reason) > MaxAttemptReasonBytes {
			return nil, bad("has an invalid attempt")
		}
		st.attempts = append(st.attempts, attempt{n: a.Attempt, consumer: a.Consumer, leasedAt: a.LeasedAtMs, endedAt: a.EndedAtMs, outcome: outcome(a.Outcome), reason: a.Reason})
	}
	for _, e := range r.Events {
		if e.Kind <= uint32(eventEnqueued) || e.Kind >= uint32(eventLimit) || len(e.Who) > MaxQueueNameLen || len(e.Text) > MaxAttemptReasonBytes {
			return nil, bad("has an invalid event")
		}
		st.events = append(st.events, event{at: e.AtMs, kind: eventKind(e.Kind), who: e.Who, text: e.Text, ms: e.Ms, n: e.N})
	}
	return st, nil
}
