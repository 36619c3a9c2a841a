package state

import (
	"encoding/binary"
	"slices"
)

// packedHeaders is a message's headers as one immutable string (issue
// 24: memory near the payload): for each header in key order, the
// key's length (uvarint), the key, the value's length and the value. ""
// is no headers. A map of two headers held ~400 bytes per message (the
// map's table and a string per key and value, as the entry's decode
// made them); packed they take their bytes plus four length bytes, in
// one allocation.
//
// Only the representation changed: what a message costs
// (contentCost), what snapshots and digests carry (a map in
// MessageRecord, marshalled in key order) and what readers see (a map)
// are as before, so no log version is involved. An empty map is kept
// apart from none, as the map was (emptyHeaders).
type packedHeaders string

// emptyHeaders is an empty, not nil, map of headers: a byte no packing
// makes (a header takes at least two).
const emptyHeaders packedHeaders = "\x00"

// packHeaders packs h: one allocation, the packed string (the keys are
// sorted and the headers packed in buffers on the stack, up to a few
// headers and a few hundred bytes).
func packHeaders(h map[string]string) packedHeaders {
	switch {
	case h == nil:
		return ""
	case len(h) == 0:
		return emptyHeaders
	}
	var keyBuf [8]string
	keys := keyBuf[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var packBuf [256]byte
	b := packBuf[:0]
	for _, k := range keys {
		v := h[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return packedHeaders(b)
}

// each calls f with every header in key order until it returns false.
func (p packedHeaders) each(f func(k, v string) bool) {
	if p == emptyHeaders {
		return
	}
	s := string(p)
	next := func() string {
		var n, shift uint
		i := 0
		for ; s[i] >= 0x80; i++ {
			n |= uint(s[i]&0x7f) << shift
			shift += 7
		}
		n |= uint(s[i]) << shift
		v := s[i+1 : i+1+int(n)]
		s = s[i+1+int(n):]
		return v
	}
	for len(s) > 0 {
		k := next()
		if !f(k, next()) {
			return
		}
	}
}

// count is the number of headers.
func (p packedHeaders) count() int {
	n := 0
	p.each(func(string, string) bool { n++; return true })
	return n
}

// into returns the headers as a map: m, cleared and filled, when it is
// not nil (a caller that marshals one message after another reuses one
// map), else a new one; nil for none.
func (p packedHeaders) into(m map[string]string) map[string]string {
	if p == "" {
		return nil
	}
	if m == nil {
		m = make(map[string]string, p.count())
	} else {
		clear(m)
	}
	p.each(func(k, v string) bool { m[k] = v; return true })
	return m
}

// cost is what the headers count in contentCost: the per-header
// overhead and the bytes of each key and value.
func (p packedHeaders) cost() int64 {
	var n int64
	p.each(func(k, v string) bool { n += int64(HeaderOverheadBytes + len(k) + len(v)); return true })
	return n
}

// splitHeaders splits packed headers h (neither none nor empty) into
// those a message whose own and common headers were lastOwn and
// lastCommon also had, with the same values (common), and the rest
// (own); same reports whether common is lastCommon, in which case common
// is not built (body.shared can be reused as it is). Both keep h's key
// order, so each is a packing of its headers. Linear in the three.
func splitHeaders(h, lastOwn, lastCommon packedHeaders) (own, common packedHeaders, same bool) {
	var ownBuf, commonBuf [256]byte
	ob, cb := ownBuf[:0], commonBuf[:0]
	hr, ar, br := pairReader{h}, pairReader{lastOwn}, pairReader{lastCommon}
	ak, av, _, aok := ar.next()
	bk, bv, _, bok := br.next()
	for {
		k, v, raw, ok := hr.next()
		if !ok {
			break
		}
		for aok && ak < k {
			ak, av, _, aok = ar.next()
		}
		for bok && bk < k {
			bk, bv, _, bok = br.next()
		}
		if aok && ak == k && av == v || bok && bk == k && bv == v {
			cb = append(cb, raw...)
		} else {
			ob = append(ob, raw...)
		}
	}
	if same = string(cb) == string(lastCommon); !same {
		common = packedHeaders(cb)
	}
	if len(cb) == 0 {
		return h, common, same // all its own: h as it is
	}
	return packedHeaders(ob), common, same
}

// pairReader reads packed headers one header at a time, in key order.
type pairReader struct{ p packedHeaders }

// next is the next header, its encoded bytes, and false after the last.
func (r *pairReader) next() (k, v, raw string, ok bool) {
	s := string(r.p)
	if s == "" || r.p == emptyHeaders {
		return "", "", "", false
	}
	i := 0
	field := func() string {
		var n, shift uint
		for ; s[i] >= 0x80; i++ {
			n |= uint(s[i]&0x7f) << shift
			shift += 7
		}
		n |= uint(s[i]) << shift
		f := s[i+1 : i+1+int(n)]
		i += 1 + int(n)
		return f
	}
	k = field()
	v = field()
	raw, r.p = s[:i], packedHeaders(s[i:])
	return k, v, raw, true
}
