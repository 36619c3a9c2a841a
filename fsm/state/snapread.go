package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"runtime"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
)

// decodeBatch bounds one unit of parallel decoding: a batch holds up to
// this many records or, past it, this many bytes (one record may exceed
// it on its own).
const (
	decodeBatchRecords = 256
	decodeBatchBytes   = 1 << 20
)

// recordBatch is a run of consecutive length-delimited records, copied
// out of the reader so that a worker can decode them while the reader
// moves on. The records are decoded into values held by the batch, which
// circulates: a restore of a million messages allocates no record.
type recordBatch[T any] struct {
	raw  []byte
	ends []int // end offset in raw of each record
	recs []T
	err  error         // framing error after the records (reader), or decoding error at len(recs) (worker)
	done chan struct{} // closed once decoded
}

// recordDecoder decodes runs of records of one type: a reader goroutine
// frames them (sequential: each length prefix says where the next starts),
// workers decode the batches in parallel, and the caller receives the
// records in file order. Decoding is a pure function of the bytes, so the
// records, and the state the caller builds from them in that order, are
// exactly what decoding one by one gives.
type recordDecoder[T any] struct {
	workers, batchRecords, batchBytes int
	// decode decodes one record's bytes into *rec, overwriting all of it.
	decode func(b []byte, rec *T) error
}

func newRecordDecoder[T any](decode func(b []byte, rec *T) error) recordDecoder[T] {
	return recordDecoder[T]{
		// The caller indexes what the workers decode: leave it a core.
		workers:      min(max(runtime.GOMAXPROCS(0)-1, 1), 4),
		batchRecords: decodeBatchRecords,
		batchBytes:   decodeBatchBytes,
		decode:       decode,
	}
}

// protoRecord decodes a record of message type M with proto.Unmarshal
// (the records no fast decoder is written for).
func protoRecord[M any, P interface {
	*M
	proto.Message
}](b []byte, rec *M) error {
	return proto.Unmarshal(b, P(rec))
}

// records reads exactly n records from r and yields them in order, or
// yields an error (framing or decoding; the records before it were good)
// and stops. A record yielded is valid until the loop body returns: the
// caller copies what it keeps. Every goroutine it started has ended when
// the loop over it ends, early or not.
func (d recordDecoder[T]) records(r *bufio.Reader, n uint64) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		if n == 0 {
			return
		}
		// Batches circulate: free -> reader -> (work, order) -> caller ->
		// free. Their number bounds the memory held: ~2 per worker of
		// batchBytes.
		nBatches := 2*d.workers + 2
		free := make(chan *recordBatch[T], nBatches)
		for range nBatches {
			free <- &recordBatch[T]{}
		}
		work := make(chan *recordBatch[T], nBatches)
		order := make(chan *recordBatch[T], nBatches)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer func() {
			close(stop)
			wg.Wait()
		}()
		wg.Go(func() {
			defer close(work)
			defer close(order)
			d.frame(r, n, free, work, order, stop)
		})
		for range d.workers {
			wg.Go(func() {
				for b := range work {
					d.decodeBatch(b)
				}
			})
		}
		for b := range order {
			<-b.done
			for i := range b.recs {
				if !yield(&b.recs[i], nil) {
					return
				}
			}
			if b.err != nil {
				yield(nil, b.err)
				return
			}
			clear(b.recs) // let the caller's records go
			free <- b
		}
	}
}

// frame copies n records from r into batches and hands each to the workers
// and, in the same order, to the caller.
func (d recordDecoder[T]) frame(r *bufio.Reader, n uint64, free <-chan *recordBatch[T], work, order chan<- *recordBatch[T], stop <-chan struct{}) {
	for n > 0 {
		var b *recordBatch[T]
		select {
		case b = <-free:
		case <-stop:
			return
		}
		b.raw, b.ends, b.recs, b.err = b.raw[:0], b.ends[:0], b.recs[:0], nil
		b.done = make(chan struct{})
		for n > 0 && len(b.ends) < d.batchRecords && len(b.raw) < d.batchBytes {
			if b.err = readRecordInto(r, &b.raw); b.err != nil {
				n = 0 // nothing after a framing error
				break
			}
			b.ends = append(b.ends, len(b.raw))
			n--
		}
		// order first: the caller waits on done, which a worker closes.
		order <- b
		work <- b
	}
}

// decodeBatch decodes b's records; a framing error the reader met stays
// after them.
func (d recordDecoder[T]) decodeBatch(b *recordBatch[T]) {
	defer close(b.done)
	b.recs = slices.Grow(b.recs[:0], len(b.ends))[:len(b.ends)]
	start := 0
	for i, end := range b.ends {
		if err := d.decode(b.raw[start:end], &b.recs[i]); err != nil {
			b.recs = b.recs[:i]
			b.err = err
			return
		}
		start = end
	}
}

// readRecordInto appends the body of the next length-delimited record of r
// to *buf, as protodelim frames it, with the same bound on its size.
func readRecordInto(r *bufio.Reader, buf *[]byte) error {
	size, err := binary.ReadUvarint(r)
	switch {
	case errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	case err != nil:
		return err
	case size > maxRecordBytes:
		return fmt.Errorf("record of %d bytes, more than the %d allowed", size, maxRecordBytes)
	}
	start := len(*buf)
	*buf = slices.Grow(*buf, int(size))[:start+int(size)]
	if _, err := io.ReadFull(r, (*buf)[start:]); err != nil {
		*buf = (*buf)[:start]
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}
