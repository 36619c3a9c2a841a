package raftgroup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// restoreProgressEvery is how often a restore at start-up logs how far it
// has come.
const restoreProgressEvery = 3 * time.Second

// countingRestorer is an FSM that can count the messages of a restore as it
// goes (fsm.FSM), for the progress log. Its RestoreCounting reads rc to the
// end and fails, keeping its state, if the last read fails: so the snapshot
// can be checked while it is read (openChecked).
type countingRestorer interface {
	RestoreCounting(rc io.ReadCloser, messages *atomic.Int64) error
}

// startupRestore restores the newest snapshot into the FSM on a goroutine of
// its own, started before the log store is opened, so that reading the
// snapshot (most of a restart with a large backlog) overlaps opening the
// log (bolt rebuilds its freelist by walking raft.db). Raft is then started
// with NoSnapshotRestoreOnStart: it takes the same newest snapshot's index,
// term and configuration from its metadata and does not restore again.
//
// If this restore fails, Raft is started as before and restores by itself,
// trying each snapshot from the newest (which then fails again, with
// Raft's own log of why) to the oldest.
type startupRestore struct {
	done   chan struct{}
	cancel chan struct{}
	// Set before done is closed.
	meta *raft.SnapshotMeta // the snapshot restored; nil if none was tried
	err  error
}

// startRestore begins restoring the newest snapshot of snaps (whose files
// are under dir) into fsm.
func startRestore(log *slog.Logger, snaps *raft.FileSnapshotStore, dir string, fsm raft.FSM) *startupRestore {
	r := &startupRestore{done: make(chan struct{}), cancel: make(chan struct{})}
	go func() {
		defer close(r.done)
		metas, err := snaps.List()
		if err != nil {
			r.err = fmt.Errorf("list snapshots: %w", err)
			return
		}
		if len(metas) == 0 {
			return
		}
		r.meta = metas[0] // newest first, as Raft orders them
		r.err = restoreSnapshot(log, snaps, dir, r.meta, fsm, r.cancel)
	}()
	return r
}

// wait returns once the restore has ended. ok says Raft must not restore
// again: the newest snapshot is in the FSM.
func (r *startupRestore) wait(log *slog.Logger) (ok bool) {
	<-r.done
	if r.err != nil {
		log.Warn("restoring the newest snapshot failed; Raft tries each snapshot in turn", "err", r.err)
		return false
	}
	return r.meta != nil
}

// stop cuts the restore short (the node is not starting after all) and
// waits for it to end.
func (r *startupRestore) stop() {
	close(r.cancel)
	<-r.done
}

func restoreSnapshot(log *slog.Logger, snaps *raft.FileSnapshotStore, dir string, meta *raft.SnapshotMeta, fsm raft.FSM, cancel <-chan struct{}) error {
	start := time.Now()
	log = log.With("snapshot", meta.ID, "index", meta.Index, "bytes", meta.Size)
	counting, _ := fsm.(countingRestorer)
	var src io.ReadCloser
	var err error
	if counting != nil {
		if src, err = openChecked(filepath.Join(dir, meta.ID), cancel); err != nil {
			log.Warn("cannot check the snapshot while reading it; checking it first", "err", err)
		}
	}
	if src == nil {
		// Raft's own reader: it reads the whole file for its CRC first.
		if _, src, err = snaps.Open(meta.ID); err != nil {
			return err
		}
	}
	cr := &countingReader{r: src}
	var messages atomic.Int64
	progress := func(msg string) {
		el := time.Since(start)
		read := cr.n.Load()
		args := []any{"read_bytes", read, "elapsed", el.Round(time.Millisecond)}
		if meta.Size > 0 {
			args = append(args, "percent", fmt.Sprintf("%.1f", 100*float64(read)/float64(meta.Size)))
		}
		if s := el.Seconds(); s > 0 {
			args = append(args, "mib_per_s", fmt.Sprintf("%.1f", float64(read)/(1<<20)/s))
		}
		if counting != nil {
			n := messages.Load()
			args = append(args, "messages", n)
			if s := el.Seconds(); s > 0 {
				args = append(args, "messages_per_s", int64(float64(n)/s))
			}
		}
		log.Info(msg, args...)
	}
	log.Info("restoring state from the newest snapshot, while the Raft log opens")
	tick := time.NewTicker(restoreProgressEvery)
	stopTick := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-tick.C:
				progress("restoring state from snapshot")
			case <-stopTick:
				return
			}
		}
	})
	if counting != nil {
		err = counting.RestoreCounting(cr, &messages)
	} else {
		err = fsm.Restore(cr)
	}
	tick.Stop()
	close(stopTick)
	wg.Wait()
	if err != nil {
		return err
	}
	progress("restored state from snapshot")
	return nil
}

// countingReader counts the bytes read through it (for progress).
type countingReader struct {
	r io.ReadCloser
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

// Raft's snapshot layout (FileSnapshotStore): <dir>/snapshots/<id>/ holds
// meta.json, with the state file's CRC-64 (ECMA), and state.bin.
const (
	snapshotMetaFile  = "meta.json"
	snapshotStateFile = "state.bin"
)

// checkedChunk is how much of the state file the checking reader reads at
// a time, and checkedChunks how many chunks it reads ahead.
const (
	checkedChunk  = 1 << 20
	checkedChunks = 4
)

var crcTable = crc64.MakeTable(crc64.ECMA)

// openChecked opens the state file of the snapshot in dir for reading as
// Raft's FileSnapshotStore.Open does, but without reading the whole file
// for its CRC first: a goroutine reads the file ahead, computing the CRC
// as it goes, so checking overlaps decoding, and the last Read returns an
// error instead of io.EOF if the CRC does not match. A restore reads to
// the end (the FSM refuses trailing data), so it fails on a mismatch, and
// the FSM keeps its state until a restore succeeds.
func openChecked(dir string, cancel <-chan struct{}) (io.ReadCloser, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotMetaFile))
	if err != nil {
		return nil, err
	}
	var meta struct{ CRC []byte }
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("snapshot metadata: %w", err)
	}
	if len(meta.CRC) == 0 {
		return nil, errors.New("snapshot metadata has no CRC")
	}
	f, err := os.Open(filepath.Join(dir, snapshotStateFile))
	if err != nil {
		return nil, err
	}
	c := &checkedReader{
		chunks: make(chan checkedRead, checkedChunks),
		free:   make(chan []byte, checkedChunks),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		f:      f,
	}
	for range checkedChunks {
		c.free <- make([]byte, checkedChunk)
	}
	go c.readAhead(meta.CRC, cancel)
	return c, nil
}

// checkedRead is one chunk of the file, or the reader's final error
// (io.EOF if the CRC matched).
type checkedRead struct {
	data []byte
	err  error
}

type checkedReader struct {
	chunks chan checkedRead
	free   chan []byte
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when readAhead has returned
	f      *os.File

	cur     []byte // unread part of the current chunk
	buf     []byte // the current chunk's buffer, returned to free when read
	err     error  // sticky final error
	closing sync.Once
}

func (c *checkedReader) readAhead(want []byte, cancel <-chan struct{}) {
	defer close(c.done)
	h := crc64.New(crcTable)
	for {
		// A cancel wins over a free buffer: select picks among ready
		// cases at random, so without this check a cancelled restore
		// read on to the end about once in 30 (TestOpenChecked/cancelled
		// failed in a fresh-clone make test).
		select {
		case <-cancel:
			c.chunks <- checkedRead{err: errors.New("restore cancelled")}
			return
		default:
		}
		var buf []byte
		select {
		case buf = <-c.free:
		case <-c.stop:
			return
		case <-cancel:
			c.chunks <- checkedRead{err: errors.New("restore cancelled")}
			return
		}
		n, err := io.ReadFull(c.f, buf)
		h.Write(buf[:n])
		if n > 0 {
			c.chunks <- checkedRead{data: buf[:n]}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			if got := h.Sum(nil); !bytes.Equal(got, want) {
				err = fmt.Errorf("snapshot state file CRC mismatch: stored %x, computed %x", want, got)
			} else {
				err = io.EOF
			}
			c.chunks <- checkedRead{err: err}
			return
		case err != nil:
			c.chunks <- checkedRead{err: fmt.Errorf("read snapshot state file: %w", err)}
			return
		}
	}
}

func (c *checkedReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.buf != nil {
			c.free <- c.buf[:cap(c.buf)]
			c.buf = nil
		}
		r := <-c.chunks
		if r.err != nil {
			c.err = r.err
			continue
		}
		c.cur, c.buf = r.data, r.data
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// Close stops the read-ahead and closes the file.
func (c *checkedReader) Close() error {
	c.closing.Do(func() { close(c.stop) })
	// readAhead may be blocked handing over a chunk: take them.
	for drained := false; !drained; {
		select {
		case <-c.chunks:
		case <-c.done:
			drained = true
		}
	}
	return c.f.Close()
}
