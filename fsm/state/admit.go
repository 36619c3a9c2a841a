package state

import (
	"fmt"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// AdmitVersion is the log version from which admission is an apply rule:
// an Enqueue batch that would pass its queue's max_depth or max_bytes, or
// the cluster's max_queued_bytes (a replicated setting from this version
// on, SetClusterSettings), is refused with ErrQueueFull as the entry
// applies, on every replica alike, and nothing of it is stored. Below it
// the leader checked committed state before proposing, which concurrent
// proposals could overrun. The same version bounds dedup_window_ms by
// MaxDedupWindowMs for queues created or updated from then on.
const AdmitVersion uint32 = 9

// What the state counts for what it holds, in bytes: the content of a
// message as stored plus a fixed overhead for the record, its tree items
// and index entries, and for each header its map entry. A dedup entry
// (kept for its window, also after its message is gone) costs
// DedupEntryOverheadBytes plus its id: two tree entries and the id. These
// are what stats.bytes reports and max_bytes and max_queued_bytes compare
// against. BenchmarkMessageCost measures the heap stored messages take
// against this count: 0.59 (empty payloads) to 1.04 (1 KiB with two
// headers, keys and a dedup id), 1.01 for 16 KiB of headers. A message
// costs less than this since the compact record (data.go), but what is
// counted stays: admission is an apply rule of log version 9, and replicas
// that counted differently would admit differently.
const (
	MessageOverheadBytes    = 320
	HeaderOverheadBytes     = 64
	DedupEntryOverheadBytes = 224
)

// MaxDedupWindowMs bounds dedup_window_ms from log version AdmitVersion
// (7 days): every entry is kept for the whole window, so the window is a
// memory commitment, not only a promise.
const MaxDedupWindowMs = 7 * 24 * 3600 * 1000

// contentCost is what a message with this content costs (MessageCost).
func contentCost(payload int, headers map[string]string, fairnessKey string, throttleKeys []string, dedupID, concurrencyKey string) int64 {
	// The concurrency key (ConcurrencyVersion) adds its length: only
	// entries of that version carry one, so older entries count as before.
	n := int64(MessageOverheadBytes + payload + len(fairnessKey) + len(dedupID) + len(concurrencyKey))
	for k, v := range headers {
		n += int64(HeaderOverheadBytes + len(k) + len(v))
	}
	for _, k := range throttleKeys {
		n += int64(len(k))
	}
	return n
}

// MessageCost is what the state counts for m once stored: payload,
// headers (keys and values), fairness, throttle and dedup keys, and the
// per-message overhead. A dead-lettered message also counts its origin
// queue's name and the reason.
func MessageCost(m *fsmv1.EnqueueMessage) int64 {
	return contentCost(len(m.GetPayload()), m.GetHeaders(), m.GetFairnessKey(), m.GetThrottleKeys(), m.GetDedupId(), m.GetConcurrencyKey())
}

// size is what m costs (MessageCost). It depends on fields a message
// keeps through leases and returns, and on its story (history.go, at most
// MaxStoryBytes), so a message's cost changes when it is dead-lettered
// and, from log version HistoryVersion, as its story grows.
func (m *message) size() int64 {
	return contentCost(len(m.payload), nil, m.fairnessKey(), m.throttleKeys(), m.dedupID, m.concurrencyKey()) + m.headerCost() + int64(len(m.origin())+len(m.dlReason())) + m.story().cost()
}

// dedupCost is what one dedup entry costs.
func dedupCost(id string) int64 { return DedupEntryOverheadBytes + int64(len(id)) }

// addDedup and dropDedup keep the dedup byte counters with the trees.
func (s *Store) addDedup(q *queue, id string) {
	q.dedupBytes += dedupCost(id)
	s.dedupBytes += dedupCost(id)
}

func (s *Store) dropDedup(q *queue, id string) {
	q.dedupBytes -= dedupCost(id)
	s.dedupBytes -= dedupCost(id)
}

// held is what the state counts against max_queued_bytes: messages, dedup
// entries and recently settled outcomes, across queues.
func (s *Store) held() int64 { return s.totalBytes + s.dedupBytes + s.recentBytes }

// admit decides whether a batch of valid messages fits q: what it would
// add (messages that are not duplicates of a live dedup entry or of an
// earlier message of the batch, and their new dedup entries) against
// max_depth, max_bytes and maxHeld (the cluster's max_queued_bytes; 0 =
// unlimited). All or nothing: a batch that does not fit is refused whole.
// A batch of duplicates only always fits (it adds nothing, and its
// answer is the original ids).
func (s *Store) admit(q *queue, msgs []*fsmv1.EnqueueMessage, maxHeld int64) error {
	var n, bytes, dedup int64
	var seen map[string]struct{}
	for _, m := range msgs {
		if id := m.GetDedupId(); id != "" {
			if _, dup := seen[id]; dup {
				continue
			}
			e, ok := q.dedup.Get(dedupKey(id))
			if ok && e.expiresMs > s.lastNow {
				continue
			}
			if seen == nil {
				seen = map[string]struct{}{}
			}
			seen[id] = struct{}{}
			if !ok {
				dedup += dedupCost(id) // an expired entry is replaced: no change
			}
		}
		n++
		bytes += MessageCost(m)
	}
	if n == 0 {
		return nil
	}
	depth := q.ready + q.delayed + q.inFlight
	if q.cfg.MaxDepth > 0 && depth+n > q.cfg.MaxDepth {
		return fmt.Errorf("%w: %s holds %d messages, %d more would pass its max_depth of %d", ErrQueueFull, q.name, depth, n, q.cfg.MaxDepth)
	}
	if q.cfg.MaxBytes > 0 && q.bytes+bytes > q.cfg.MaxBytes {
		return fmt.Errorf("%w: %s holds %s, %s more would pass its max_bytes of %s", ErrQueueFull, q.name, bytesText(q.bytes), bytesText(bytes), bytesText(q.cfg.MaxBytes))
	}
	if held := s.held(); maxHeld > 0 && held+bytes+dedup > maxHeld {
		return fmt.Errorf("%w: the cluster holds %s, %s more would pass max_queued_bytes of %s", ErrQueueFull, bytesText(held), bytesText(bytes+dedup), bytesText(maxHeld))
	}
	return nil
}

// validateDedupWindow is AdmitVersion's bound on a config's dedup window.
func validateDedupWindow(c *fsmv1.QueueConfig) error {
	if w := c.GetDedupWindowMs(); w > MaxDedupWindowMs {
		return fmt.Errorf("%w: config.dedup_window_ms is %d (%s), the limit is %d (%s): every dedup entry is kept in memory for the whole window",
			ErrInvalid, w, HumanMs(w), int64(MaxDedupWindowMs), HumanMs(MaxDedupWindowMs))
	}
	return nil
}

// SetClusterSettings changes the replicated cluster settings (log version
// AdmitVersion): max_queued_bytes, when present (0 = unlimited). Lowering
// it below what the cluster holds refuses new enqueues only; nothing held
// is dropped.
//
// From log version GuardVersion it also sets max_queues, when present (0
// = unlimited); lowering it below the number of queues refuses new
// queues only. Earlier entries ignore the field, as older builds do.
func (tx *Tx) SetClusterSettings(c *fsmv1.SetClusterSettings) *Done {
	if !c.GetFromMeta() {
		if err := tx.moved("SetClusterSettings"); err != nil {
			return failed(err)
		}
	}
	k, err := tx.writeKey(recentSettings, "", c.GetIdempotencyKey())
	switch {
	case err != nil:
		return failed(err)
	case tx.repeat(k):
		return &Done{} // answered with the settings as they are now
	}
	maxQueues := c.MaxQueues != nil && tx.version >= GuardVersion
	if c.MaxQueuedBytes != nil && c.GetMaxQueuedBytes() < 0 {
		return failed(fmt.Errorf("%w: max_queued_bytes is negative (%d)", ErrInvalid, c.GetMaxQueuedBytes()))
	}
	if maxQueues && c.GetMaxQueues() < 0 {
		return failed(fmt.Errorf("%w: max_queues is negative (%d)", ErrInvalid, c.GetMaxQueues()))
	}
	if c.MaxQueuedBytes != nil {
		tx.s.maxQueuedBytes = c.GetMaxQueuedBytes()
	}
	if maxQueues {
		tx.s.maxQueues = c.GetMaxQueues()
	}
	tx.done(k)
	return &Done{}
}

// DefaultMaxQueues is max_queues from the entry that raises the cluster
// to GuardVersion until an operator changes it: creating and deleting a
// queue costs O(queues), and so does freezing the state for a snapshot
// under the write lock, so the count is bounded by default.
const DefaultMaxQueues = 10_000

// checkQueueCount refuses a CreateQueue that would add n queues past
// max_queues (GuardVersion; dead-letter queues count like any queue).
func (tx *Tx) checkQueueCount(n int) error {
	have := int64(len(tx.s.queues))
	if tx.version < GuardVersion || tx.s.maxQueues == 0 || have+int64(n) <= tx.s.maxQueues {
		return nil
	}
	return fmt.Errorf("%w: the cluster holds %d queues (dead-letter queues included) and this would make %d, past the cluster setting max_queues %d: delete queues, or raise it (raftq cluster set max-queues N)",
		ErrLimit, have, have+int64(n), tx.s.maxQueues)
}

// Settings are the replicated cluster settings.
type Settings struct {
	// MaxQueuedBytes bounds what the cluster holds (View.Held); 0 =
	// unlimited. Enforced at apply from cluster version AdmitVersion.
	MaxQueuedBytes int64
	// MaxQueues bounds how many queues the cluster holds, dead-letter
	// queues included; 0 = unlimited. Enforced at apply from cluster
	// version GuardVersion, which starts it at DefaultMaxQueues.
	MaxQueues int64
}

// Settings reads the replicated cluster settings.
func (v View) Settings() Settings {
	return Settings{MaxQueuedBytes: v.s.maxQueuedBytes, MaxQueues: v.s.maxQueues}
}

// Held is what the state counts against max_queued_bytes: messages, dedup
// entries and recently settled outcomes, in bytes (MessageCost).
func (v View) Held() int64 { return v.s.held() }
