package btree

import (
	"cmp"
	"slices"
	"testing"
)

// pair is a fuzzed item: ordered by k alone, so a ReplaceOrInsert of a
// key already held replaces the item (v tells which one came back).
type pair struct {
	k uint16
	v uint32
}

func lessPair(a, b pair) bool { return a.k < b.k }

// model is what a tree must hold: a slice sorted by key.
type model []pair

func (m model) find(k uint16) (int, bool) {
	return slices.BinarySearchFunc(m, k, func(p pair, k uint16) int { return cmp.Compare(p.k, k) })
}

// checkFuzzed fails t unless tr's nodes are a B-tree of this package's
// shape (check: at most 2*degree-1 items a node, one child more than
// items in an inner node, leaves at one depth, order, Len) with no
// empty node but a lone root (a split at the end leaves the right node
// one item, below the minimum, which removal must still handle), holding
// exactly m.
func checkFuzzed(t *testing.T, tr *BTreeG[pair], m model, what string) {
	t.Helper()
	var got model
	leafDepth := -1
	var walk func(n *node[pair], depth int)
	walk = func(n *node[pair], depth int) {
		if len(n.items) > tr.maxItems() {
			t.Fatalf("%s: node of %d items, max %d", what, len(n.items), tr.maxItems())
		}
		if len(n.items) == 0 && (depth > 0 || len(n.children) > 0) {
			t.Fatalf("%s: empty node at depth %d with %d children", what, depth, len(n.children))
		}
		if len(n.children) == 0 {
			if leafDepth < 0 {
				leafDepth = depth
			} else if depth != leafDepth {
				t.Fatalf("%s: leaves at depths %d and %d", what, leafDepth, depth)
			}
			got = append(got, n.items...)
			return
		}
		if len(n.children) != len(n.items)+1 {
			t.Fatalf("%s: inner node of %d items and %d children", what, len(n.items), len(n.children))
		}
		for i, c := range n.children {
			walk(c, depth+1)
			if i < len(n.items) {
				got = append(got, n.items[i])
			}
		}
	}
	if tr.root != nil {
		walk(tr.root, 0)
	}
	if !slices.Equal(got, m) {
		t.Fatalf("%s: the nodes hold %d items %v, the model %d %v", what, len(got), clip(got), len(m), clip(m))
	}
	if tr.Len() != len(m) {
		t.Fatalf("%s: Len %d, the model holds %d", what, tr.Len(), len(m))
	}
	var asc, desc model
	tr.Ascend(func(p pair) bool { asc = append(asc, p); return true })
	tr.Descend(func(p pair) bool { desc = append(desc, p); return true })
	slices.Reverse(desc)
	if !slices.Equal(asc, m) || !slices.Equal(desc, m) {
		t.Fatalf("%s: Ascend gives %d items, Descend %d, the model holds %d", what, len(asc), len(desc), len(m))
	}
}

func clip(m model) model {
	if len(m) > 20 {
		return m[:20]
	}
	return m
}

// FuzzOperations: any sequence of inserts (anywhere, replacing, and
// ascending bursts, the fills the fork splits at the end), removals
// (anywhere, FIFO from the front, from the back), clones changed apart
// on either side, lookups, range scans and clears keeps a tree of this
// package's shape that holds exactly what a sorted slice does, and
// leaves every clone as it was when taken.
func FuzzOperations(f *testing.F) {
	f.Add([]byte{3, 2, 60, 0, 2, 70, 0, 6, 50, 0, 2, 40, 0, 6, 90, 0, 3, 0, 5})
	f.Add([]byte{1, 2, 79, 0, 7, 0, 0, 6, 79, 0, 2, 10, 0, 5, 0, 0, 3, 1, 7})
	f.Add([]byte{0, 0, 10, 1, 0, 20, 1, 0, 5, 0, 2, 30, 0, 7, 1, 0, 3, 10, 1, 4, 0, 0, 9, 2, 200})
	f.Add([]byte{6, 2, 79, 0, 2, 79, 0, 2, 79, 0, 7, 0, 0, 3, 100, 0, 3, 50, 0, 6, 60, 0, 11, 1, 0, 2, 30, 0})
	f.Add([]byte{7, 2, 79, 0, 2, 79, 0, 2, 79, 0, 2, 79, 0, 7, 1, 0, 10, 0, 100, 6, 79, 0, 3, 1, 44, 2, 79, 0, 5, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		// Small nodes split and merge often; 32 is the state's degree.
		degree := []int{2, 3, 4, 5, 6, 8, 16, 32}[ops[0]%8]
		ops = ops[1:]
		tr := NewG(degree, lessPair)
		var m model
		type frozen struct {
			tr *BTreeG[pair]
			m  model
		}
		var clones []frozen
		serial := uint32(0)
		insert := func(k uint16) {
			serial++
			p := pair{k, serial}
			old, replaced := tr.ReplaceOrInsert(p)
			i, found := m.find(k)
			if replaced != found || found && old != m[i] {
				t.Fatalf("ReplaceOrInsert(%d) gave %v %v, the model %v", k, old, replaced, found)
			}
			if found {
				m[i] = p
			} else {
				m = slices.Insert(m, i, p)
			}
		}
		removed := func(what string, got pair, ok bool, i int) {
			t.Helper()
			if ok != (i >= 0) || ok && got != m[i] {
				t.Fatalf("%s gave %v %v, the model %v", what, got, ok, i >= 0)
			}
			if ok {
				m = slices.Delete(m, i, i+1)
			}
		}
		last := func() int { return len(m) - 1 }
		for step := 0; len(ops) >= 3; step++ {
			op, a, b := ops[0]%12, ops[1], ops[2]
			ops = ops[3:]
			k := uint16(a)<<8 | uint16(b)
			k %= 600 // keys repeat
			switch op {
			case 0, 1:
				insert(k)
			case 2: // an ascending burst past the largest key
				next := uint16(0)
				if len(m) > 0 {
					next = m[last()].k + 1
				}
				for j := range uint16(a%80) + 1 {
					if next+j < next || len(m) >= 3000 { // wrapped, or big enough
						break
					}
					insert(next + j)
				}
			case 3:
				got, ok := tr.Delete(pair{k: k})
				i, found := m.find(k)
				if !found {
					i = -1
				}
				removed("Delete", got, ok, i)
			case 4:
				got, ok := tr.DeleteMin()
				i := 0
				if len(m) == 0 {
					i = -1
				}
				removed("DeleteMin", got, ok, i)
			case 5:
				got, ok := tr.DeleteMax()
				removed("DeleteMax", got, ok, last())
			case 6: // FIFO: the oldest go
				for range int(a%80) + 1 {
					got, ok := tr.DeleteMin()
					i := 0
					if len(m) == 0 {
						i = -1
					}
					removed("DeleteMin", got, ok, i)
				}
			case 7: // a clone; either side changes on
				c := tr.Clone()
				if a&1 == 1 {
					tr, c = c, tr
				}
				clones = append(clones, frozen{c, slices.Clone(m)})
				if len(clones) > 4 {
					checkFuzzed(t, clones[0].tr, clones[0].m, "an older clone")
					clones = clones[1:]
				}
			case 8:
				got, ok := tr.Get(pair{k: k})
				i, found := m.find(k)
				if ok != found || found && got != m[i] || tr.Has(pair{k: k}) != found {
					t.Fatalf("Get(%d) gave %v %v, the model %v", k, got, ok, found)
				}
				mn, okMin := tr.Min()
				mx, okMax := tr.Max()
				if okMin != (len(m) > 0) || okMax != okMin || okMin && (mn != m[0] || mx != m[last()]) {
					t.Fatalf("Min %v %v, Max %v %v, the model holds %d", mn, okMin, mx, okMax, len(m))
				}
			case 9: // ranges, both ways, stopped early
				lo, hi := k, k+uint16(b%64)
				limit := int(a%16) + 1
				var got, want model
				tr.AscendRange(pair{k: lo}, pair{k: hi}, func(p pair) bool { got = append(got, p); return len(got) < limit })
				for _, p := range m {
					if p.k >= lo && p.k < hi && len(want) < limit {
						want = append(want, p)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("AscendRange[%d, %d) limit %d: %v, the model %v", lo, hi, limit, got, want)
				}
				got, want = nil, nil
				tr.DescendRange(pair{k: hi}, pair{k: lo}, func(p pair) bool { got = append(got, p); return len(got) < limit })
				for i := last(); i >= 0; i-- {
					if p := m[i]; p.k <= hi && p.k > lo && len(want) < limit {
						want = append(want, p)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("DescendRange(%d, %d] limit %d: %v, the model %v", lo, hi, limit, got, want)
				}
				got, want = nil, nil
				tr.AscendGreaterOrEqual(pair{k: k}, func(p pair) bool { got = append(got, p); return len(got) < limit })
				for _, p := range m {
					if p.k >= k && len(want) < limit {
						want = append(want, p)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("AscendGreaterOrEqual(%d) limit %d: %v, the model %v", k, limit, got, want)
				}
				got, want = nil, nil
				tr.DescendLessOrEqual(pair{k: k}, func(p pair) bool { got = append(got, p); return len(got) < limit })
				for i := last(); i >= 0; i-- {
					if p := m[i]; p.k <= k && len(want) < limit {
						want = append(want, p)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("DescendLessOrEqual(%d) limit %d: %v, the model %v", k, limit, got, want)
				}
			case 10: // removals anywhere, a run of them
				for j := range uint16(b%16) + 1 {
					kk := (k + j*37) % 600
					got, ok := tr.Delete(pair{k: kk})
					i, found := m.find(kk)
					if !found {
						i = -1
					}
					removed("Delete", got, ok, i)
				}
			case 11:
				tr.Clear(a&1 == 1) // nodes to the free list its clones share, or not
				m = nil
			}
			checkFuzzed(t, tr, m, "the tree")
		}
		for i, c := range clones {
			checkFuzzed(t, c.tr, c.m, "clone "+string(rune('0'+i)))
		}
	})
}
