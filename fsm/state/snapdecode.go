package state

import (
	"encoding/binary"
	"errors"
	"strings"
	"unicode/utf8"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A snapshot's message and dedup records are nearly all of a restore
// (issue 24: a million messages restored in seconds). proto.Unmarshal
// allocates a record, a headers map and a string per key and value for
// each, which the restore then packs into one string and drops. The
// decoders here read the fields the state keeps straight from the wire,
// the headers into their packed form, and give up (errSlowRecord) on
// anything they do not expect: a field they do not know, a wire type
// other than the field's, a story, a string that is not UTF-8. A record
// given up on is decoded by proto.Unmarshal, so what a record decodes to,
// and which records fail, is exactly what proto.Unmarshal gives
// (TestFastRecordDecoders). The format is unchanged.

// loadedMessage is a snapshot's message record as decoded for the
// restore: rec without its headers, which are in headers, packed.
type loadedMessage struct {
	rec     fsmv1.MessageRecord
	headers packedHeaders
}

// loadedDedup is a snapshot's dedup record as the queue's tree holds it
// (its key hashed by the decoding worker).
type loadedDedup struct {
	entry dedupEntry
}

// errSlowRecord: the fast decoder leaves this record to proto.Unmarshal.
var errSlowRecord = errors.New("record left to proto.Unmarshal")

// decodeMessageRecord decodes a MessageRecord into out.
func decodeMessageRecord(b []byte, out *loadedMessage) error {
	if err := fastMessageRecord(b, out); err == nil || !errors.Is(err, errSlowRecord) {
		return err
	}
	out.rec = fsmv1.MessageRecord{}
	if err := proto.Unmarshal(b, &out.rec); err != nil {
		return err
	}
	out.headers, out.rec.Headers = packHeaders(out.rec.Headers), nil
	return nil
}

// headerField is one header's key and value as they lie in the record.
type headerField struct{ k, v []byte }

// fastMessageRecord is decodeMessageRecord for the records it expects,
// errSlowRecord for any other.
func fastMessageRecord(b []byte, out *loadedMessage) error {
	out.rec = fsmv1.MessageRecord{}
	out.headers = ""
	r := &out.rec
	var stack [4]headerField
	headers := stack[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errSlowRecord
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errSlowRecord
			}
			b = b[n:]
			switch num {
			case 1:
				r.Id = v
			case 4:
				r.Priority = int32(v)
			case 6:
				r.Weight = uint32(v)
			case 8:
				r.EnqueuedMs = int64(v)
			case 9:
				r.VisibleMs = int64(v)
			case 10:
				r.ExpiresMs = int64(v)
			case 11:
				r.Attempts = int32(v)
			case 12:
				r.LeaseToken = v
			case 14:
				r.DeadlineMs = int64(v)
			case 18:
				r.State = fsmv1.MessageState(int32(v))
			case 19:
				r.DeadLetteredMs = int64(v)
			case 20:
				r.DeadLetteredIndex = v
			default:
				return errSlowRecord
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errSlowRecord
			}
			b = b[n:]
			if num == 2 {
				r.Payload = append([]byte(nil), v...) // as proto.Unmarshal: nil when empty
				continue
			}
			if num == 3 {
				k, val, ok := headerEntry(v)
				if !ok {
					return errSlowRecord
				}
				headers = append(headers, headerField{k, val})
				continue
			}
			if !utf8.Valid(v) {
				return errSlowRecord
			}
			switch num {
			case 5:
				r.FairnessKey = string(v)
			case 7:
				r.ThrottleKeys = append(r.ThrottleKeys, string(v))
			case 13:
				r.ConsumerId = string(v)
			case 15:
				r.OriginQueue = string(v)
			case 16:
				r.DeadLetterReason = string(v)
			case 17:
				r.DedupId = string(v)
			case 22:
				r.ConcurrencyKey = string(v)
			default: // 21, the story, among them
				return errSlowRecord
			}
		default:
			return errSlowRecord
		}
	}
	if len(headers) > 0 {
		out.headers = packHeaderFields(headers)
	}
	return nil
}

// headerEntry is the key and value of one map entry of a record's
// headers; ok is false for an entry proto.Unmarshal is left to read (a
// field other than key and value, a wire type other than theirs, a string
// that is not UTF-8). A field missing is empty, as proto.Unmarshal has it.
func headerEntry(b []byte) (k, v []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num != 1 && num != 2 {
			return nil, nil, false
		}
		b = b[n:]
		s, n := protowire.ConsumeBytes(b)
		if n < 0 || !utf8.Valid(s) {
			return nil, nil, false
		}
		b = b[n:]
		if num == 1 {
			k = s
		} else {
			v = s
		}
	}
	return k, v, true
}

// packHeaderFields is packHeaders of the map the fields make: a later
// field with a key an earlier one has replaces it, as in a map.
func packHeaderFields(fs []headerField) packedHeaders {
	sorted := true
	for i := 1; i < len(fs) && sorted; i++ {
		sorted = string(fs[i-1].k) < string(fs[i].k)
	}
	if !sorted { // never from Stream, which marshals maps in key order
		m := make(map[string]string, len(fs))
		for _, f := range fs {
			m[string(f.k)] = string(f.v)
		}
		return packHeaders(m)
	}
	n := 0
	for _, f := range fs {
		n += protowire.SizeVarint(uint64(len(f.k))) + len(f.k) + protowire.SizeVarint(uint64(len(f.v))) + len(f.v)
	}
	// Exactly sized: one allocation, as packHeaders' final copy.
	var sb strings.Builder
	sb.Grow(n)
	var lb [binary.MaxVarintLen64]byte
	for _, f := range fs {
		sb.Write(binary.AppendUvarint(lb[:0], uint64(len(f.k))))
		sb.Write(f.k)
		sb.Write(binary.AppendUvarint(lb[:0], uint64(len(f.v))))
		sb.Write(f.v)
	}
	return packedHeaders(sb.String())
}

// decodeDedupEntry decodes a DedupEntry into out.
func decodeDedupEntry(b []byte, out *loadedDedup) error {
	var id string
	var messageID uint64
	var expiresMs int64
	fast := true
	for rest := b; len(rest) > 0 && fast; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			fast = false
			break
		}
		rest = rest[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 || !utf8.Valid(v) {
				fast = false
				break
			}
			id, rest = string(v), rest[n:]
		case (num == 2 || num == 3) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				fast = false
				break
			}
			rest = rest[n:]
			if num == 2 {
				messageID = v
			} else {
				expiresMs = int64(v)
			}
		default:
			fast = false
		}
	}
	if !fast {
		de := &fsmv1.DedupEntry{}
		if err := proto.Unmarshal(b, de); err != nil {
			return err
		}
		id, messageID, expiresMs = de.DedupId, de.MessageId, de.ExpiresMs
	}
	out.entry = dedupKey(id)
	out.entry.messageID, out.entry.expiresMs = messageID, expiresMs
	return nil
}
