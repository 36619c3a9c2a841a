package state

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/raftq/raftq/internal/btree"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

type msgState uint8

const (
	stateReady msgState = iota
	stateDelayed
	stateLeased
)

// message is immutable once stored: every transition stores a modified copy,
// so a snapshot that cloned the message trees keeps a consistent picture
// without copying payloads.
//
// It is laid out for a large backlog (issue 15: memory per message): what
// every queued message has is inline, in one 96-byte allocation beside
// its payload (the decoded entry's own slice, never copied); what most do
// not have sits behind a pointer that is nil for them and that copies
// share: the content only some messages carry (body), and the rest of a
// message that is or was leased, delayed or dead-lettered, or has a story
// (more). The payload stays its own allocation: joined to the record it
// would be copied once more and, at sizes such as 1 KiB, rounded up to a
// larger size class than the two allocations' sum.
type message struct {
	id         uint64
	payload    []byte
	body       *body // nil: no headers, fairness or throttle keys
	dedupID    string
	enqueuedMs int64
	expiresMs  int64 // TTL instant, 0 = none
	priority   int32
	weight     uint32
	attempts   int32
	state      msgState
	// more is nil unless the message is leased, is or once was delayed,
	// is in a dead-letter queue (or once was: see DeleteQueue) or has a
	// story (history.go): one pointer for all of them keeps the record at
	// 96 bytes (issue 24: it was 112, with the lease and the dead-letter
	// record behind pointers of their own and the delay inline).
	more *more
}

// more is what a message has only once it is leased, delayed or
// dead-lettered, or has a story. Shared by a message's copies like the
// rest: replaced (withMore), never changed once stored.
type more struct {
	lease     lease       // zero unless leased
	visibleMs int64       // delayed until; kept once ready again, as snapshots record it
	dead      *deadLetter // nil unless dead-lettered or with a story
}

// withMore replaces m's more by a copy that change has changed (nil when
// that leaves nothing).
func (m *message) withMore(change func(*more)) {
	var x more
	if m.more != nil {
		x = *m.more
	}
	change(&x)
	m.more = nil
	if x != (more{}) {
		m.more = &x
	}
}

// visibleMs is the instant a delayed message becomes ready (0: never
// delayed, or redriven since).
func (m *message) visibleMs() int64 {
	if m.more == nil {
		return 0
	}
	return m.more.visibleMs
}

// setVisible records the instant a delayed message becomes ready.
func (m *message) setVisible(ms int64) {
	if ms != m.visibleMs() {
		m.withMore(func(x *more) { x.visibleMs = ms })
	}
}

// dead is m's dead-letter record and story (nil: none).
func (m *message) dead() *deadLetter {
	if m.more == nil {
		return nil
	}
	return m.more.dead
}

// setDead replaces m's dead-letter record and story.
func (m *message) setDead(d *deadLetter) {
	if d != m.dead() {
		m.withMore(func(x *more) { x.dead = d })
	}
}

// body is the content some messages carry besides their payload. It is
// immutable and shared: by a message's copies, and by consecutive
// messages of one fairness key with the same keys and no headers (the
// key's record of its last one, keyQueue.body), so a backlog of one
// tenant's messages holds its keys once. What a message has in common
// with the previous message of its key, its keys and the headers both
// carry with the same value (a content type, a producer's name), is
// shared the same way (shared, keyQueue.last), so a message's own
// allocation holds only the headers that differ (a trace id). Issue 24:
// at 1M messages with two headers each, every message had an 80-byte
// body copying its keys and a 64-byte packed copy of both headers; now
// a 24-byte body and its one differing header, 32 bytes.
type body struct {
	headers packedHeaders // headers.go: those not in shared
	shared  *sharedPart   // nil: none
}

// sharedPart is what a body shares with the bodies of other messages:
// their keys, and the headers they all carry with the same values.
// Immutable. A header is in the body's headers or in its shared
// headers, never both.
type sharedPart struct {
	headers        packedHeaders
	fairnessKey    string
	throttleKeys   []string
	concurrencyKey string // concurrency.go
}

// newShared is the shared part of a message with these common headers
// and keys, nil for none.
func newShared(headers packedHeaders, fairnessKey string, throttleKeys []string, concurrencyKey string) *sharedPart {
	if headers == "" && fairnessKey == "" && throttleKeys == nil && concurrencyKey == "" {
		return nil
	}
	return &sharedPart{headers: headers, fairnessKey: fairnessKey, throttleKeys: throttleKeys, concurrencyKey: concurrencyKey}
}

// sameKeys reports whether p (nil: none) has these keys (throttle keys
// nil, none, told apart from empty, as callers may see them).
func (p *sharedPart) sameKeys(fairnessKey string, throttleKeys []string, concurrencyKey string) bool {
	if p == nil {
		return fairnessKey == "" && throttleKeys == nil && concurrencyKey == ""
	}
	return p.fairnessKey == fairnessKey && p.concurrencyKey == concurrencyKey &&
		(p.throttleKeys == nil) == (throttleKeys == nil) && slices.Equal(p.throttleKeys, throttleKeys)
}

func (p *sharedPart) commonHeaders() packedHeaders {
	if p == nil {
		return ""
	}
	return p.headers
}

// lease is what a leased message records of its lease.
type lease struct {
	token      uint64
	consumerID string
	deadlineMs int64
}

// deadLetter is what a message in a dead-letter queue records, and its
// story (attempt history and life events, log version HistoryVersion,
// history.go). Shared by a message's copies: replaced, never changed
// once stored.
type deadLetter struct {
	origin string // the queue it came from; "" once that queue is deleted
	reason string
	// From cluster version RedriveVersion: the state's clock and the
	// entry's index when it was dead-lettered (0: before, redrive.go).
	atMs    int64
	atIndex uint64
	story   *story // nil: nothing recorded
}

// headers are m's headers as a new map (nil for none).
func (m *message) headers() map[string]string { return m.headersInto(nil) }

// headersInto returns m's headers as a map: dst, cleared and filled, when
// it is not nil, else a new one; nil for none (packedHeaders.into).
func (m *message) headersInto(dst map[string]string) map[string]string {
	if m.body == nil {
		return nil
	}
	own, common := m.body.headers, m.body.shared.commonHeaders()
	if common == "" {
		return own.into(dst)
	}
	dst = common.into(dst)
	own.each(func(k, v string) bool { dst[k] = v; return true })
	return dst
}

// headerCost is what m's headers count in contentCost.
func (m *message) headerCost() int64 {
	if m.body == nil {
		return 0
	}
	return m.body.headers.cost() + m.body.shared.commonHeaders().cost()
}

// hasHeaders reports whether m has headers (an empty map counts).
func (m *message) hasHeaders() bool {
	return m.body != nil && (m.body.headers != "" || m.body.shared.commonHeaders() != "")
}

// keys is m's shared part, where its keys are (nil: no keys and no
// common headers).
func (m *message) keys() *sharedPart {
	if m.body == nil {
		return nil
	}
	return m.body.shared
}

func (m *message) fairnessKey() string {
	if k := m.keys(); k != nil {
		return k.fairnessKey
	}
	return ""
}

func (m *message) concurrencyKey() string {
	if k := m.keys(); k != nil {
		return k.concurrencyKey
	}
	return ""
}

func (m *message) throttleKeys() []string {
	if k := m.keys(); k != nil {
		return k.throttleKeys
	}
	return nil
}

func (m *message) lease() lease {
	if m.more == nil {
		return lease{}
	}
	return m.more.lease
}

func (m *message) leaseToken() uint64 { return m.lease().token }

func (m *message) consumerID() string { return m.lease().consumerID }

func (m *message) deadlineMs() int64 { return m.lease().deadlineMs }

func (m *message) origin() string {
	if d := m.dead(); d != nil {
		return d.origin
	}
	return ""
}

func (m *message) dlReason() string {
	if d := m.dead(); d != nil {
		return d.reason
	}
	return ""
}

// setLease records a lease (all zero: none).
func (m *message) setLease(token uint64, consumerID string, deadlineMs int64) {
	l := lease{token: token, consumerID: consumerID, deadlineMs: deadlineMs}
	if l != m.lease() {
		m.withMore(func(x *more) { x.lease = l })
	}
}

// setDeadLetter records where a dead-lettered message came from and why
// (both empty: neither), keeping its story.
func (m *message) setDeadLetter(origin, reason string) {
	st := m.story()
	var d *deadLetter
	if origin != "" || reason != "" || st != nil {
		d = &deadLetter{origin: origin, reason: reason, story: st}
	}
	m.setDead(d)
}

// story is what the message records of its attempts and life (nil:
// nothing).
func (m *message) story() *story {
	if d := m.dead(); d != nil {
		return d.story
	}
	return nil
}

// setStory replaces the message's story, keeping the rest of its record.
func (m *message) setStory(st *story) {
	d := deadLetter{story: st}
	if old := m.dead(); old != nil {
		d = *old
		d.story = st
	}
	var next *deadLetter
	if d != (deadLetter{}) {
		next = &d
	}
	m.setDead(next)
}

// newBody is the body of a message with this content, nil for none.
func newBody(headers map[string]string, fairnessKey string, throttleKeys []string, concurrencyKey string) *body {
	return newPackedBody(packHeaders(headers), fairnessKey, throttleKeys, concurrencyKey)
}

// newPackedBody is newBody of headers already packed ("" for none), all
// its own.
func newPackedBody(headers packedHeaders, fairnessKey string, throttleKeys []string, concurrencyKey string) *body {
	return sharingBody(headers, newShared("", fairnessKey, throttleKeys, concurrencyKey))
}

// sharingBody is the body of a message with these headers of its own ("" for
// none) and shared part (nil for none): nil for neither.
func sharingBody(headers packedHeaders, shared *sharedPart) *body {
	if headers == "" && shared == nil {
		return nil
	}
	return &body{headers: headers, shared: shared}
}

// msgItem is what the per-queue message tree holds: the id inline so lookups
// need no allocation.
type msgItem struct {
	id uint64
	m  *message
}

func lessMsgItem(a, b msgItem) bool { return a.id < b.id }

// timedRef orders work by time across queues: delayed messages, TTLs, lease
// deadlines.
type timedRef struct {
	at    int64
	queue string
	id    uint64
}

func lessTimedRef(a, b timedRef) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.queue != b.queue {
		return a.queue < b.queue
	}
	return a.id < b.id
}

// keyQueue is the FIFO of ready messages of one fairness key at one priority.
type keyQueue struct {
	key    string
	seq    uint64 // activation order; a key that empties and refills gets a new one
	weight uint32 // weight of the most recently enqueued message of the key
	newest uint64 // id whose weight is recorded
	ids    *btree.BTreeG[uint64]
	// groups splits ids by the messages' throttle keys (throttleGroup), so
	// the scheduler can step over a throttled group's whole backlog at
	// once instead of message by message. Derived, like ids: not in
	// snapshots or digests, no apply rule reads it.
	groups map[string]*btree.BTreeG[uint64]
	// body is the body of the key's newest indexed message when it has no
	// headers: Enqueue gives it to the next message with the same keys,
	// so they hold one copy (message.body). last is the body of the
	// newest indexed message that has one: Enqueue shares its keys and
	// the headers in common with the next message (packedBodyFor).
	// Derived, like ids.
	body *body
	last *body
	// groupGen counts the groups created since the key became active, so
	// a scheduler that found every group throttled can tell whether a new
	// one (maybe deliverable) has appeared since.
	groupGen uint64
	// open counts the ready messages their concurrency keys' caps let
	// through now (concurrency.go); the level's open tree holds the keys
	// where it is above 0. Derived, like ids.
	open int
}

// throttleGroup is the name of the group of messages carrying exactly
// these throttle keys: "" for none, the key itself for one (the common
// case: no allocation), otherwise a length-prefixed list, which no single
// key equals unless it starts with a NUL byte (encoded the same way).
func throttleGroup(keys []string) string {
	switch {
	case len(keys) == 0:
		return ""
	case len(keys) == 1 && (keys[0] == "" || keys[0][0] != 0):
		return keys[0]
	}
	b := []byte{0}
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return string(b)
}

// group is the name of m's group among its fairness key's ready
// messages: its throttle group, split further by its concurrency key, so
// that the scheduler can step over a capped key's backlog at once, as
// over a throttled one. A concurrency key's group starts with two NUL
// bytes, which no throttle group does (a list's second byte is the
// uvarint length of a non-empty key).
func (m *message) group() string {
	g := throttleGroup(m.throttleKeys())
	ck := m.concurrencyKey()
	if ck == "" {
		return g
	}
	b := append([]byte{0, 0}, binary.AppendUvarint(nil, uint64(len(ck)))...)
	b = append(b, ck...)
	return string(append(b, g...))
}

func lessID(a, b uint64) bool { return a < b }

type keyRef struct {
	seq uint64
	key string
}

func lessKeyRef(a, b keyRef) bool { return a.seq < b.seq }

// level holds the ready messages of one priority of one queue.
type level struct {
	priority int32
	count    int
	keys     map[string]*keyQueue
	active   *btree.BTreeG[keyRef] // keys with ready messages, in activation order, but paused ones: the delivery ring
	held     *btree.BTreeG[keyRef] // keys with ready messages that are paused (pause.go): out of the ring
	open     *btree.BTreeG[keyRef] // of the ring's keys, those with an open message (concurrency.go): what NextKey walks
}

// dedupRef is a dedup entry in the expiry index, ordered by (at,
// messageID): the id of the message that created the entry is unique, so
// no string is compared on this hot path (one insert and one removal per
// enqueued message). queue and dedupID find the entry; they are not part
// of the order. The entry's hash is not kept: the sweep that needs it
// computes it again (dedupKey), and without it a ref is 48 bytes, whose
// 63-item nodes fill a 3,072-byte size class, where 56 bytes' took 4,096
// (issue 24: memory per message).
type dedupRef struct {
	at        int64
	messageID uint64
	queue     string
	dedupID   string
}

func lessDedupRef(a, b dedupRef) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.messageID < b.messageID
}

// dedupEntry is ordered by (FNV-1a hash of the id, id): an order no one
// reads, chosen because nearly every comparison in the tree is then one of
// two integers rather than of two strings. Snapshots list entries in this
// order too, so a digest depends on it: replicas compared by Verify must
// run the same version.
type dedupEntry struct {
	hash      uint64
	dedupID   string
	messageID uint64
	expiresMs int64
}

// dedupKey is the tree key of a dedup id.
func dedupKey(id string) dedupEntry {
	h := uint64(14695981039346656037) // FNV-1a 64: fixed, so every replica orders alike
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return dedupEntry{hash: h, dedupID: id}
}

func lessDedupEntry(a, b dedupEntry) bool {
	if a.hash != b.hash {
		return a.hash < b.hash
	}
	return a.dedupID < b.dedupID
}

type queue struct {
	name    string
	raw     *fsmv1.QueueConfig // as the client set it (zeros = default)
	cfg     *fsmv1.QueueConfig // effective
	autoDLQ bool               // created implicitly as some queue's DLQ
	isDLQ   bool               // some queue names it as dead-letter queue

	msgs   *btree.BTreeG[msgItem]
	levels []*level // sorted by priority, highest first

	ready, delayed, inFlight, bytes int64 // bytes: what its messages cost (MessageCost)
	dedupBytes                      int64 // what its dedup entries cost (dedupCost)
	deadLettered                    int64 // messages from this queue now in its DLQ

	enqueuedTotal, ackedTotal, nackedTotal, expiredTotal int64

	// Counted as this replica applies grants and dead-letterings since it
	// loaded its state; for metrics only, so neither snapshotted nor in
	// the digest (every replica applies the same entries, so their rates
	// agree; a restart starts them again at 0, as Prometheus expects).
	grantedApplied, deadLetteredApplied int64

	// conc holds the concurrency keys with messages (concurrency.go);
	// derived from the messages, like the counters above.
	conc map[string]*concKey

	dedup  *btree.BTreeG[dedupEntry]  // by dedup id; a tree so snapshots clone it in O(1)
	recent *btree.BTreeG[recentEntry] // recently settled outcomes (recent.go)

	// Rate-limited redrives from its DLQ in progress, by id (redrive.go);
	// at most MaxRedriveJobs, so a slice.
	redrives []*redriveJob
	// pauses by fairness key, "" = the whole queue, to the state-clock
	// instant each ends at (0 = until resumed); nil when none (pause.go).
	pauses map[string]int64
}

const btreeDegree = 32

func newQueue(name string) *queue {
	return &queue{
		name:   name,
		msgs:   btree.NewG(btreeDegree, lessMsgItem),
		dedup:  btree.NewG(btreeDegree, lessDedupEntry),
		recent: newRecentTree(),
	}
}

func (q *queue) get(id uint64) *message {
	it, ok := q.msgs.Get(msgItem{id: id})
	if !ok {
		return nil
	}
	return it.m
}

// bodyFor is the body of a message of priority prio with this content:
// the body of the fairness key's last ready message there when it has the
// same keys and neither has headers, else a new one (nil for none).
func (q *queue) bodyFor(prio int32, headers map[string]string, fairnessKey string, throttleKeys []string, concurrencyKey string) *body {
	return q.packedBodyFor(prio, packHeaders(headers), fairnessKey, throttleKeys, concurrencyKey)
}

// packedBodyFor is bodyFor of headers already packed ("" for none): it
// shares what the message has in common with the last body of its key
// (keyQueue.last) when their keys are the same.
func (q *queue) packedBodyFor(prio int32, headers packedHeaders, fairnessKey string, throttleKeys []string, concurrencyKey string) *body {
	var kq *keyQueue
	if l := q.level(prio, false); l != nil {
		kq = l.keys[fairnessKey]
	}
	if kq == nil {
		return newPackedBody(headers, fairnessKey, throttleKeys, concurrencyKey)
	}
	if headers == "" && kq.body != nil && kq.body.shared.sameKeys(fairnessKey, throttleKeys, concurrencyKey) {
		return kq.body
	}
	if kq.last == nil || !kq.last.shared.sameKeys(fairnessKey, throttleKeys, concurrencyKey) {
		return newPackedBody(headers, fairnessKey, throttleKeys, concurrencyKey)
	}
	last := kq.last.shared
	if headers == "" || headers == emptyHeaders {
		if last.commonHeaders() == "" {
			return sharingBody(headers, last) // nil when last is
		}
		return newPackedBody(headers, fairnessKey, throttleKeys, concurrencyKey)
	}
	own, common, same := splitHeaders(headers, kq.last.headers, last.commonHeaders())
	if same {
		return sharingBody(own, last)
	}
	return sharingBody(own, newShared(common, fairnessKey, throttleKeys, concurrencyKey))
}

func (q *queue) level(prio int32, create bool) *level {
	i, found := slices.BinarySearchFunc(q.levels, prio, func(l *level, p int32) int { return cmp.Compare(p, l.priority) })
	if found {
		return q.levels[i]
	}
	if !create {
		return nil
	}
	l := &level{priority: prio, keys: map[string]*keyQueue{}, active: btree.NewG(8, lessKeyRef), held: btree.NewG(8, lessKeyRef), open: btree.NewG(8, lessKeyRef)}
	q.levels = slices.Insert(q.levels, i, l)
	return l
}

func (q *queue) dropLevel(l *level) {
	q.levels = slices.DeleteFunc(q.levels, func(x *level) bool { return x == l })
}
