package state

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
)

// many returns a store of two queues with n messages each, every one with
// a dedup id (so many dedup entries too), some delayed, some leased, and
// its applied index.
func many(t *testing.T, n int) (*Store, uint64) {
	t.Helper()
	s := New()
	idx := uint64(1)
	for _, q := range []string{"a", "b"} {
		if r := s.Begin(idx, 1, 1, 1000, NewTouched()).CreateQueue(&fsmv1.CreateQueue{Name: q}); r.Err != nil {
			t.Fatal(r.Err)
		}
		idx++
	}
	var leaseable []*fsmv1.Grant
	for i := 0; i < n; i += 100 {
		var msgs []*fsmv1.EnqueueMessage
		for j := i; j < min(i+100, n); j++ {
			m := &fsmv1.EnqueueMessage{Payload: fmt.Appendf(nil, "payload %d", j), DedupId: fmt.Sprint("d", j), FairnessKey: fmt.Sprint("k", j%7)}
			if j%5 == 0 {
				m.DelayMs = 1_000_000
			}
			msgs = append(msgs, m)
		}
		for _, q := range []string{"a", "b"} {
			enq := s.Begin(idx, 1, 1, 1000+int64(idx), NewTouched()).Enqueue(&fsmv1.Enqueue{Batches: []*fsmv1.EnqueueBatch{{Queue: q, Messages: msgs}}})
			if enq.Err != nil || enq.Batches[0].Err != nil {
				t.Fatal(enq.Err, enq.Batches[0].Err)
			}
			idx++
			leaseable = append(leaseable, &fsmv1.Grant{Queue: q, MessageId: enq.Batches[0].IDs[1], ConsumerId: "c", DeadlineMs: 9_000_000})
		}
	}
	if g := s.Begin(idx, 1, 1, 1000+int64(idx), NewTouched()).Grant(&fsmv1.LeaseGrant{Grants: leaseable}); g.Err != nil {
		t.Fatal(g.Err)
	}
	for i := uint64(1); i <= idx; i++ {
		s.SetApplied(i)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	return s, idx
}

// TestLoadManyRecords: a snapshot of many messages and dedup entries, more
// than one batch of the parallel decoder, loads into the same state (the
// same digest) as was streamed, and LoadReporting counts every message.
func TestLoadManyRecords(t *testing.T) {
	const n = 3*decodeBatchRecords + 17
	s, idx := many(t, n)
	fr := s.Freeze(idx)
	want, err := fr.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fr.Stream(&buf); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the same every time, whatever the workers' timing
		var messages atomic.Int64
		loaded, err := LoadReporting(bufio.NewReader(bytes.NewReader(buf.Bytes())), &messages)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := loaded.Freeze(loaded.AppliedIndex()).Digest(); got != want {
			t.Fatalf("loaded digest %s, streamed %s", got, want)
		}
		if got := messages.Load(); got != 2*n {
			t.Fatalf("counted %d messages, want %d", got, 2*n)
		}
		if loaded.dedupExp.Len() != s.dedupExp.Len() || loaded.dedupExp.Len() != 2*n {
			t.Fatalf("dedup expiry index holds %d, want %d", loaded.dedupExp.Len(), 2*n)
		}
		var a, b []dedupRef
		s.dedupExp.Ascend(func(r dedupRef) bool { a = append(a, r); return true })
		loaded.dedupExp.Ascend(func(r dedupRef) bool { b = append(b, r); return true })
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("dedup expiry index differs at %d: %+v, want %+v", i, b[i], a[i])
			}
		}
	}
}

// TestLoadCutShort: a snapshot cut anywhere inside its records, or with a
// record garbled, is ErrInvalid, and the decoder's goroutines are gone
// when Load returns.
func TestLoadCutShort(t *testing.T) {
	s, idx := many(t, 2*decodeBatchRecords)
	var buf bytes.Buffer
	if err := s.Freeze(idx).Stream(&buf); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	base := runtime.NumGoroutine()
	for _, cut := range []int{len(full) / 7, len(full) / 3, len(full) / 2, len(full) - 40} {
		if _, err := Load(bufio.NewReader(bytes.NewReader(full[:cut]))); !errors.Is(err, ErrInvalid) {
			t.Fatalf("cut at %d of %d: %v, want ErrInvalid", cut, len(full), err)
		}
	}
	garbled := bytes.Clone(full)
	for i := len(garbled) / 2; i < len(garbled)/2+64; i++ {
		garbled[i] = 0xff
	}
	if _, err := Load(bufio.NewReader(bytes.NewReader(garbled))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("garbled: %v, want ErrInvalid", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the failed loads, %d before", runtime.NumGoroutine(), base)
		}
		runtime.Gosched()
	}
}

// failingReader returns its data, then err instead of io.EOF.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestLoadFailsOnLastRead: a reader whose last read fails (a checksum that
// did not match, found at the end) fails the load, with its error.
func TestLoadFailsOnLastRead(t *testing.T) {
	s, idx := seeded(t)
	var buf bytes.Buffer
	if err := s.Freeze(idx).Stream(&buf); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("checksum mismatch")
	_, err := Load(bufio.NewReader(&failingReader{data: buf.Bytes(), err: bad}))
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, bad) {
		t.Fatalf("Load: %v, want ErrInvalid and the reader's error", err)
	}
}
