package workload

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"
)

// HeaderSize is the part of every payload the benchmark reads back: the
// message key (8 bytes) and the enqueue time in Unix nanoseconds (8 bytes).
// The rest is filler.
const HeaderSize = 16

const (
	maxProducerBits = 8
	seqBits         = 48
)

// Key names one message uniquely within a run: the phase that sent it, the
// producer, and the producer's sequence number.
type Key uint64

// MakeKey packs a key; phase and producer must fit in 8 bits, seq in 48.
func MakeKey(phase, producer int, seq uint64) Key {
	return Key(uint64(phase&0xff)<<56 | uint64(producer&0xff)<<seqBits | seq&(1<<seqBits-1))
}

// Phase is the index of the phase that sent the message.
func (k Key) Phase() int { return int(k >> 56) }

// Producer is the index of the producer that sent the message.
func (k Key) Producer() int { return int(k>>seqBits) & 0xff }

// Seq is the producer's sequence number of the message.
func (k Key) Seq() uint64 { return uint64(k) & (1<<seqBits - 1) }

// Payloads builds benchmark payloads of one size that share their filler.
type Payloads struct {
	size   int
	filler []byte
}

// NewPayloads returns a builder of size-byte payloads (size >= HeaderSize).
// The filler is pseudo-random so that no layer compresses it away.
func NewPayloads(size int) *Payloads {
	r := rand.New(rand.NewPCG(1, 2))
	f := make([]byte, size)
	for i := range f {
		f[i] = byte(r.Uint32())
	}
	return &Payloads{size: size, filler: f}
}

// Make returns a new payload for k stamped with at.
func (p *Payloads) Make(k Key, at time.Time) []byte {
	b := make([]byte, p.size)
	copy(b[HeaderSize:], p.filler[HeaderSize:])
	binary.BigEndian.PutUint64(b[0:8], uint64(k))
	binary.BigEndian.PutUint64(b[8:16], uint64(at.UnixNano()))
	return b
}

// ErrShortPayload is returned by Parse for a payload the benchmark did not
// write.
var ErrShortPayload = errors.New("payload shorter than the benchmark header")

// Parse reads the key and the enqueue time back from a payload.
func Parse(b []byte) (Key, time.Time, error) {
	if len(b) < HeaderSize {
		return 0, time.Time{}, ErrShortPayload
	}
	k := Key(binary.BigEndian.Uint64(b[0:8]))
	at := time.Unix(0, int64(binary.BigEndian.Uint64(b[8:16])))
	return k, at, nil
}
