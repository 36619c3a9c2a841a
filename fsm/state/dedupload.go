package state

import (
	"cmp"
	"slices"
	"sync"
)

// A snapshot's dedup entries (one per message of the last dedup window:
// a million in issue 24's restart) arrive in their queue tree's order, by
// hash of the id, which is a random order for the expiry index. Both
// indexes are built once a queue's entries are all read, each on its own
// goroutine: the queue's tree in arrival order (ascending for it), the
// expiry index in its own order, sorted first. Inserted one by one in
// arrival order the expiry index shifted half a node of refs per insert,
// about a third of a restore; and the sort is a radix sort of a small
// pointer-free key per entry, stable, so that of two refs the index holds
// as equal the later in the snapshot still replaces the earlier, as
// inserting in snapshot order did.

// dedupChunk is how many entries one chunk of dedupChunks holds.
const dedupChunk = 1 << 14

// dedupChunks is a list of entries in chunks of dedupChunk: appending
// never copies the entries already held (one slice grown to a million
// copied each, with its pointers, again at every doubling), and the count
// a snapshot's queue record gives is not trusted to size it.
type dedupChunks struct {
	chunks [][]dedupEntry
	n      int
}

func (c *dedupChunks) add(e dedupEntry) {
	if c.n%dedupChunk == 0 {
		c.chunks = append(c.chunks, make([]dedupEntry, 0, dedupChunk))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, e)
	c.n++
}

func (c *dedupChunks) at(i int) *dedupEntry { return &c.chunks[i/dedupChunk][i%dedupChunk] }

// loadDedups adds q's entries from a snapshot, in snapshot order, to q's
// tree (a later entry with an id already there replaces it, counted once)
// and to the expiry index.
func (s *Store) loadDedups(q *queue, es *dedupChunks) {
	if es.n == 0 {
		return
	}
	var wg sync.WaitGroup
	// Only this goroutine touches q.dedup and the dedup byte counters,
	// only the caller the expiry index.
	wg.Go(func() {
		for _, c := range es.chunks {
			for _, e := range c {
				if _, dup := q.dedup.ReplaceOrInsert(e); !dup {
					s.addDedup(q, e.dedupID)
				}
			}
		}
	})
	for _, i := range dedupExpiryOrder(es) {
		e := es.at(int(i))
		s.dedupExp.ReplaceOrInsert(dedupRef{at: e.expiresMs, messageID: e.messageID, queue: q.name, key: e.name()})
	}
	wg.Wait()
}

// dedupExpiryOrder is the positions of es's entries sorted by expiry and
// then message id (the expiry index's order), stably.
func dedupExpiryOrder(es *dedupChunks) []uint32 {
	n := es.n
	minAt, maxAt := es.at(0).expiresMs, es.at(0).expiresMs
	minID, maxID := es.at(0).messageID, es.at(0).messageID
	for _, c := range es.chunks {
		for _, e := range c {
			minAt, maxAt = min(minAt, e.expiresMs), max(maxAt, e.expiresMs)
			minID, maxID = min(minID, e.messageID), max(maxID, e.messageID)
		}
	}
	order := make([]uint32, n)
	if uint64(n) > 1<<32-1 || uint64(maxAt)-uint64(minAt) >= 1<<32 || maxID-minID >= 1<<32 {
		// Spans too wide for one 64-bit key (never seen: a window's
		// expiries span minutes, and its messages' ids a few million).
		for i := range order {
			order[i] = uint32(i)
		}
		slices.SortStableFunc(order, func(a, b uint32) int {
			x, y := es.at(int(a)), es.at(int(b))
			if c := cmp.Compare(x.expiresMs, y.expiresMs); c != 0 {
				return c
			}
			return cmp.Compare(x.messageID, y.messageID)
		})
		return order
	}
	type item struct {
		key uint64 // expiry above message id, both less their minimum
		pos uint32
	}
	items := make([]item, n)
	i := 0
	for _, c := range es.chunks {
		for _, e := range c {
			items[i] = item{key: (uint64(e.expiresMs)-uint64(minAt))<<32 | (e.messageID - minID), pos: uint32(i)}
			i++
		}
	}
	radixSortStable(items, func(it item) uint64 { return it.key })
	for i, it := range items {
		order[i] = it.pos
	}
	return order
}

// radixSortStable sorts items by key, stably: least significant digit
// first, 16 bits a pass, passes where every key has the same digit
// skipped.
func radixSortStable[T any](items []T, key func(T) uint64) {
	var all uint64 // the bits any key has set
	for _, it := range items {
		all |= key(it)
	}
	out := items
	tmp := make([]T, len(items))
	var counts [1 << 16]int
	for shift := uint(0); shift < 64; shift += 16 {
		if (all>>shift)&0xffff == 0 {
			continue
		}
		clear(counts[:])
		for _, it := range items {
			counts[(key(it)>>shift)&0xffff]++
		}
		sum := 0
		for d, c := range counts {
			counts[d], sum = sum, sum+c
		}
		for _, it := range items {
			d := (key(it) >> shift) & 0xffff
			tmp[counts[d]] = it
			counts[d]++
		}
		items, tmp = tmp, items
	}
	if len(items) > 0 && &items[0] != &out[0] { // an odd number of passes
		copy(out, items)
	}
}
