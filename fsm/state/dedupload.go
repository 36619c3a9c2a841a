package state

import "sync"

// A snapshot's dedup entries (one per message of the last dedup window:
// a million in issue 24's restart) arrive in their queue tree's order, by
// hash of the id, which is a random order for the expiry index. Both
// indexes are built once a queue's entries are all read, each on its own
// goroutine: the queue's tree in arrival order (ascending for it), the
// expiry index in its own order, sorted first. Inserted one by one in
// arrival order the expiry index shifted half a node of refs per insert,
// about a third of a restore; and the sort is a radix sort of small
// pointer-free keys, stable, so that of two refs the index holds as equal
// the later in the snapshot still replaces the earlier, as inserting in
// snapshot order did.

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
		s.dedupExp.ReplaceOrInsert(dedupRef{at: e.expiresMs, messageID: e.messageID, queue: q.name, dedupID: e.dedupID})
	}
	wg.Wait()
}

// dedupExpiryOrder is the positions of es's entries sorted by expiry and
// then message id (the expiry index's order), stably: a stable radix sort
// by message id, then one by expiry.
func dedupExpiryOrder(es *dedupChunks) []uint32 {
	type item struct {
		key uint64
		pos uint32
	}
	items := make([]item, es.n)
	i := 0
	for _, c := range es.chunks {
		for _, e := range c {
			items[i] = item{key: e.messageID, pos: uint32(i)}
			i++
		}
	}
	radixSortStable(items, func(it item) uint64 { return it.key })
	for i := range items {
		// Offset so that expiries order as unsigned numbers do.
		items[i].key = uint64(es.at(int(items[i].pos)).expiresMs) ^ 1<<63
	}
	radixSortStable(items, func(it item) uint64 { return it.key })
	order := make([]uint32, es.n)
	for i, it := range items {
		order[i] = it.pos
	}
	return order
}

// radixSortStable sorts items by key, stably: least significant digit
// first, 16 bits a pass, skipping the digits every key has alike (the
// high digits of expiries within days of each other, of ids within a
// few million).
func radixSortStable[T any](items []T, key func(T) uint64) {
	if len(items) < 2 {
		return
	}
	or, and := uint64(0), ^uint64(0)
	for _, it := range items {
		k := key(it)
		or, and = or|k, and&k
	}
	differ := or ^ and // the bits some keys have and others not
	out := items
	tmp := make([]T, len(items))
	var counts [1 << 16]int
	for shift := uint(0); shift < 64; shift += 16 {
		if (differ>>shift)&0xffff == 0 {
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
	if &items[0] != &out[0] { // an odd number of passes
		copy(out, items)
	}
}
